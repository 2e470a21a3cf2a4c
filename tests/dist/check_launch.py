#!/usr/bin/env python3
"""`dp train` started by launchers, as processes on this machine: the
torchrun contract (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT:
what torchrun, Kubernetes jobs and srun-style launchers set), and Open MPI's
mpirun when it is installed. Checks that two processes train as one process
with both devices, that rank 0 alone reports and writes the checkpoint, that
a killed rank ends the survivor with exit 1 naming it (and an mpirun job
non-zero), that Ctrl-C in one rank's shell stops every rank after the same
step, and that start-up errors (a missing rank, differing world sizes)
are errors within the timeout, not hangs. With "mpi" (a build with Open
MPI), the mpi backend too (DP_BACKEND=mpi under mpirun): bitwise the Gloo
backend's result, bitwise from run to run, 3 processes as 1 process of 3
devices, a killed rank ending the job, and a clear error without mpirun.

    check_launch.py BUILD/src/cli/dp MODEL.json [mpi]
"""
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

DP = os.path.abspath(sys.argv[1])
MODEL = os.path.abspath(sys.argv[2])
HAVE_MPI_BACKEND = sys.argv[3:] == ['mpi']
passed = failed = 0


def expect(cond, what, detail=''):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f'FAILED: {what}\n{detail}')


def free_port():
    """A port nothing listens on, below the kernel's ephemeral range (where
    mpirun's daemons and Gloo's connections take theirs while we start)."""
    rng = random.Random(os.getpid() * 7919 + time.time_ns())
    while True:
        port = rng.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(('127.0.0.1', port))
                return port
            except OSError:
                continue


def train_args(*extra, epochs=2):
    return [DP, 'train', MODEL, '--data', 'synthetic:600', '--batch-size', '30', '--epochs', str(epochs),
            '--workers', '0', '--seed', '4', *extra]


def rank_env(rank, world, port, **more):
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
               LOCAL_WORLD_SIZE=str(world), MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port), DP_COMM_TIMEOUT='30')
    env.update({k: str(v) for k, v in more.items()})
    return env


def start_ranks(args, world, port, **more):
    return [subprocess.Popen(args, env=rank_env(r, world, port, **more), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for r in range(world)]


def finish(procs, timeout=240):
    out = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            o, e = p.communicate()
            e += '\n(killed at the test deadline)'
        out.append((p.returncode, o, e))
    return out


def last_json(text):
    lines = [l for l in text.strip().splitlines() if l.startswith('{')]
    return json.loads(lines[-1]) if lines else None


def descends_from(pid, ancestor):
    """Whether process `pid` is `ancestor` or below it (a rank of this job, not one of an earlier
    job still exiting, whose environment says the same)."""
    for _ in range(64):
        if pid == ancestor:
            return True
        try:
            with open(f'/proc/{pid}/stat') as f:
                pid = int(f.read().rsplit(')', 1)[1].split()[1])  # the field after the name: state, then ppid
        except (OSError, ValueError, IndexError):
            return False
        if pid <= 1:
            return False
    return False


def kill_rank_under_mpirun(cmd, label, env=None, sig=signal.SIGKILL, says=()):
    """Starts an mpirun job, sends its rank 1 (found by its environment) `sig` once it trains
    (SIGKILL: it dies; SIGSTOP: it stops answering), and checks that the whole job ends non-zero
    within the timeout, its stderr holding each of `says`."""
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    victim = None
    for _ in range(200):
        time.sleep(0.05)
        for pid in filter(str.isdigit, os.listdir('/proc')):
            try:
                with open(f'/proc/{pid}/environ', 'rb') as f:
                    environ = f.read().split(b'\0')
                with open(f'/proc/{pid}/cmdline', 'rb') as f:
                    cmdline = f.read()
            except OSError:
                continue
            if b'OMPI_COMM_WORLD_RANK=1' in environ and cmdline.startswith(DP.encode()) and \
                    descends_from(int(pid), job.pid):
                victim = int(pid)
        if victim:
            break
    expect(victim is not None, f'{label}: found rank 1')
    if not victim:
        job.kill()
        job.communicate()
        return
    time.sleep(2)
    os.kill(victim, sig)
    t0 = time.time()
    try:
        _, e = job.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        job.kill()
        _, e = job.communicate()
    try:
        os.kill(victim, signal.SIGKILL)  # a stopped rank the job left behind
    except OSError:
        pass
    what = 'a killed rank' if sig == signal.SIGKILL else 'a silent rank'
    expect(job.returncode not in (0, None), f'{label}: {what} ends the job non-zero ({job.returncode})', e)
    expect(time.time() - t0 < 30, f'{label}: {what}: within the timeout')
    for text in says:
        expect(text in e, f'{label}: {what}: the job says {text!r}', e)


def ctrl_c_under_mpirun(mpirun_cmd, label, env=None):
    """Ctrl-C in the terminal that runs mpirun: the terminal signals mpirun's process group. Open
    MPI 4.1 puts each rank in a group of its own and passes the stop on as SIGTERM, then exits;
    rank 0 must still write its checkpoint (dp died of SIGTERM before it stopped on it). An
    epoch of 60,000 rows outlasts the wait, so the file is the stop's, not an epoch end's."""
    ckpt = f'{tmp}/{label.replace(" ", "_")}_stop.ckpt'
    args = [a if a != 'synthetic:600' else 'synthetic:60000'
            for a in train_args('--devices', 'cpu:0', '--save', ckpt, epochs=1000)]
    job = subprocess.Popen(mpirun_cmd + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           start_new_session=True, env=env)
    err, training = [], threading.Event()

    def read_stderr():
        for line in job.stderr:
            err.append(line)
            if 'step ' in line:  # rank 0's first progress line: past start-up, in an epoch
                training.set()
    reader = threading.Thread(target=read_stderr)
    reader.start()
    expect(training.wait(180) and job.poll() is None and not os.path.exists(ckpt),
           f'{label}, Ctrl-C: training (before the signal)', ''.join(err))
    time.sleep(1)
    os.killpg(job.pid, signal.SIGINT)
    try:
        job.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    reader.join()
    deadline = time.time() + 30  # the ranks may outlive mpirun by the checkpoint's write
    while not os.path.exists(ckpt) and time.time() < deadline:
        time.sleep(0.1)
    expect(os.path.exists(ckpt), f"{label}, Ctrl-C to the terminal's process group: rank 0 writes the checkpoint",
           ''.join(err))
    expect(job.returncode != 0, f'{label}, Ctrl-C: the job ends non-zero (got {job.returncode})')


tmp = tempfile.mkdtemp(prefix='dp_launch_')

# 1. Two processes of one device each train as one process of two devices.
one = subprocess.run(train_args('--devices', 'cpu:0,cpu:1', '--save', f'{tmp}/one.ckpt'),
                     capture_output=True, text=True, timeout=240)
expect(one.returncode == 0, 'one process, two devices: exit 0', one.stderr)
ref = last_json(one.stdout)
res = finish(start_ranks(train_args('--devices', 'cpu:0', '--save', f'{tmp}/two.ckpt'), 2, free_port()))
(rc0, out0, err0), (rc1, out1, err1) = res
expect(rc0 == 0 and rc1 == 0, 'torchrun contract, 2 processes: both exit 0', err0 + err1)
got = last_json(out0)
expect(got is not None and got['processes'] == 2 and got['devices'] == 2, 'rank 0 reports 2 processes, 2 devices', out0)
expect(out1.strip() == '' and 'epoch' not in err1, 'rank 1 prints nothing', out1 + err1)
expect(os.path.exists(f'{tmp}/two.ckpt'), 'rank 0 wrote the checkpoint')
if ref and got:
    for key in ('train_loss', 'test_loss', 'test_accuracy'):
        a, b = ref[key], got[key]
        expect(abs(a - b) <= 1e-4 * max(1.0, abs(a)), f'{key}: 2 processes x 1 device as 1 x 2 ({b} vs {a})')

# 1b. Under torchrun, whose agent serves its own store at MASTER_PORT (and
# says so), dp's store takes the next port.
port = free_port()
with socket.socket() as agent:
    agent.bind(('127.0.0.1', port))
    agent.listen()
    res = finish(start_ranks(train_args('--devices', 'cpu:0', epochs=1), 2, port, TORCHELASTIC_USE_AGENT_STORE='True'))
expect(all(rc == 0 for rc, _, _ in res), "torchrun's agent store at MASTER_PORT: dp's at the next port",
       res[0][2] + res[1][2])

# 2. A rank killed mid-training: the survivor exits 1 within seconds, naming it.
port = free_port()
procs = start_ranks(train_args('--devices', 'cpu:0', epochs=1000), 2, port)
time.sleep(3)
expect(procs[0].poll() is None and procs[1].poll() is None, 'both ranks train (before the kill)')
procs[1].send_signal(signal.SIGKILL)
t0 = time.time()
(rc0, out0, err0), _ = finish(procs, timeout=60)
took = time.time() - t0
expect(rc0 == 1, 'survivor of a killed rank: exit 1', err0)
expect('rank 1 died or left' in err0, 'survivor names the lost rank', err0)
expect(took < 20, f'survivor noticed in {took:.1f} s (DP_COMM_TIMEOUT 30)')

# 2b. Ctrl-C in one rank's shell only (each rank started by hand): every rank
# stops after the same step, rank 0 writes the checkpoint, both exit 130 at
# once (the others used to wait in the stopped rank's next step until
# DP_COMM_TIMEOUT). A second Ctrl-C ends that rank at once, and the other
# names it.
port = free_port()
procs = start_ranks(train_args('--devices', 'cpu:0', '--save', f'{tmp}/stop.ckpt', epochs=1000), 2, port)
time.sleep(3)
expect(procs[0].poll() is None and procs[1].poll() is None, 'both ranks train (before Ctrl-C)')
procs[1].send_signal(signal.SIGINT)
t0 = time.time()
(rc0, out0, err0), (rc1, out1, err1) = finish(procs, timeout=60)
took = time.time() - t0
expect(rc0 == 130 and rc1 == 130, f'Ctrl-C in rank 1 only: both exit 130 (got {rc0}, {rc1})', err0 + err1)
expect(took < 10, f'Ctrl-C in rank 1 only: both stopped in {took:.1f} s (DP_COMM_TIMEOUT 30)')
got = last_json(out0)
expect(got is not None and got['interrupted'] is True, 'rank 0 reports the run interrupted', out0)
expect('stopped by Ctrl-C or SIGTERM (on 1 of 2 processes)' in err0 and os.path.exists(f'{tmp}/stop.ckpt'),
       'rank 0 says who stopped and writes the checkpoint', err0)
port = free_port()
procs = start_ranks(train_args('--devices', 'cpu:0', epochs=1000), 2, port)
time.sleep(3)
procs[0].send_signal(signal.SIGSTOP)  # rank 1 then waits in a collective: only a second Ctrl-C ends it
time.sleep(0.5)
procs[1].send_signal(signal.SIGINT)
time.sleep(0.5)
procs[1].send_signal(signal.SIGINT)
try:
    procs[1].wait(timeout=10)
finally:
    procs[0].send_signal(signal.SIGCONT)
(rc0, out0, err0), (rc1, out1, err1) = finish(procs, timeout=60)
expect(rc1 == -signal.SIGINT, f'a second Ctrl-C ends rank 1 at once (got {rc1})', err1)
expect(rc0 == 1 and 'rank 1 died or left' in err0, 'rank 0 then names rank 1', err0)

# 3. A rank that never comes: start-up fails within the timeout, naming it and the address.
port = free_port()
t0 = time.time()
p = subprocess.run(train_args('--devices', 'cpu:0'), env=rank_env(0, 2, port, DP_COMM_TIMEOUT=3),
                   capture_output=True, text=True, timeout=60)
expect(p.returncode == 1, 'a rank missing: exit 1', p.stderr)
expect('rank 1 of 2 did not join' in p.stderr and f'127.0.0.1:{port}' in p.stderr,
       'a rank missing: named, with the address', p.stderr)
expect(time.time() - t0 < 20, 'a rank missing: within the timeout')

# 4. Differing world sizes: a clear error on both, not a hang.
port = free_port()
procs = [subprocess.Popen(train_args('--devices', 'cpu:0'), env=rank_env(r, w, port, DP_COMM_TIMEOUT=10),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r, w in ((0, 2), (1, 3))]
res = finish(procs, timeout=60)
for r, (rc, _, err) in enumerate(res):
    expect(rc != 0 and 'WORLD_SIZE differs' in err, f'differing world sizes: rank {r} refuses', err)

# 4b. A rank failing on its own input (its data folder missing) leaves: the others learn it at
# once (dp train joins before it reads its data), not after DP_COMM_TIMEOUT (60 here).
port = free_port()
args = train_args('--devices', 'cpu:0')
t0 = time.time()
procs = [subprocess.Popen(a, env=rank_env(r, 2, port, DP_COMM_TIMEOUT=60), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
         for r, a in enumerate((args, [x if x != 'synthetic:600' else 'mnist:/nonexistent-dir' for x in args]))]
(rc0, _, err0), (rc1, _, err1) = finish(procs, timeout=120)
expect(rc0 != 0 and rc1 == 2 and 'rank 1 left the process group' in err0 and time.time() - t0 < 20,
       f'a rank without its data: rank 0 fails at once naming it ({time.time() - t0:.1f} s)', err0 + err1)
# Flags that libdp does not see (--max-steps, whether --resume is given) are compared at start;
# the same optimizer spelt two ways is the same optimizer.
port = free_port()
procs = [subprocess.Popen(train_args('--devices', 'cpu:0', '--max-steps', str(5 * (r + 1))),
                          env=rank_env(r, 2, port), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
         for r in range(2)]
for r, (rc, _, err) in enumerate(finish(procs, timeout=120)):
    expect(rc == 2 and "rank 1's dp train --max-steps differs from rank 0's: rank 0 has 5, rank 1 has 10" in err,
           f'differing --max-steps: rank {r} refuses, naming it', err)
port = free_port()
procs = [subprocess.Popen(train_args('--devices', 'cpu:0', '--max-steps', '3', '--optimizer',
                                     '{"type": "sgd", "lr": 0.05}' if r == 0 else '{"lr":5e-2,"type":"sgd"}'),
                          env=rank_env(r, 2, port), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
         for r in range(2)]
res = finish(procs, timeout=120)
expect(all(rc == 0 for rc, _, _ in res), 'one optimizer config spelt two ways: accepted', res[0][2] + res[1][2])

# 5. Open MPI's mpirun: rank and size from its environment.
mpirun = shutil.which('mpirun')
if mpirun:
    mpi = [mpirun, '--allow-run-as-root', '--oversubscribe', '-np', '2', '-x', f'MASTER_PORT={free_port()}',
           '-x', 'DP_COMM_TIMEOUT=30']
    p = subprocess.run(mpi + train_args('--devices', 'cpu:0'), capture_output=True, text=True, timeout=240)
    got = last_json(p.stdout)
    expect(p.returncode == 0 and got is not None and got['processes'] == 2, 'mpirun -np 2: trains, rank 0 reports',
           p.stdout + p.stderr)
    expect(sum(1 for l in p.stdout.splitlines() if l.startswith('{')) == 1, 'mpirun: one report', p.stdout)
    if ref and got:
        expect(abs(ref['test_loss'] - got['test_loss']) <= 1e-4 * max(1.0, ref['test_loss']),
               'mpirun: as one process of two devices')

    # A rank killed under mpirun: the job ends non-zero within the timeout.
    kill_rank_under_mpirun(mpi + train_args('--devices', 'cpu:0', epochs=1000), 'mpirun')

    ctrl_c_under_mpirun(mpi, 'mpirun')
else:
    print('mpirun not installed: its cases skipped')

# 6. The mpi backend (Open MPI's collectives, shared memory on one machine) under mpirun.
if mpirun and HAVE_MPI_BACKEND:
    # Under AddressSanitizer (CI's second round), Open MPI keeps its components' memory until the
    # process ends, in modules it has unloaded by then (LeakSanitizer's stacks name no library to
    # suppress): leaks are checked in every other case, not in processes that initialised MPI.
    mpi_env = dict(os.environ)
    if 'ASAN_OPTIONS' in mpi_env:
        mpi_env['ASAN_OPTIONS'] += ':detect_leaks=0'

    def mpi_job(np, *extra, backend='mpi', epochs=2):
        cmd = [mpirun, '--allow-run-as-root', '--oversubscribe', '-np', str(np), '-x', f'MASTER_PORT={free_port()}',
               '-x', 'DP_COMM_TIMEOUT=30', '-x', f'DP_BACKEND={backend}'] + train_args(*extra, epochs=epochs)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=mpi_env)

    runs = [mpi_job(2, '--devices', 'cpu:0', '--save', f'{tmp}/mpi{k}.ckpt') for k in range(2)]
    gloo = mpi_job(2, '--devices', 'cpu:0', '--save', f'{tmp}/gloo.ckpt', backend='gloo')
    for k, p in enumerate(runs + [gloo]):
        expect(p.returncode == 0 and last_json(p.stdout) is not None, f'mpi backend, run {k}: trains',
               p.stdout + p.stderr)
    if all(os.path.exists(f'{tmp}/{f}.ckpt') for f in ('mpi0', 'mpi1', 'gloo')):
        read = lambda f: open(f'{tmp}/{f}.ckpt', 'rb').read()
        expect(read('mpi0') == read('mpi1'), 'mpi backend: two runs write the same checkpoint, bitwise')
        # Two processes: each sum is one addition, the same whichever engine adds.
        expect(read('mpi0') == read('gloo'), 'mpi backend: the Gloo backend\'s checkpoint, bitwise')
    got = last_json(runs[0].stdout)
    if ref and got:
        for key in ('train_loss', 'test_loss'):
            expect(abs(ref[key] - got[key]) <= 1e-4 * max(1.0, abs(ref[key])),
                   f'mpi backend, {key}: 2 processes x 1 device as 1 x 2 ({got[key]} vs {ref[key]})')

    # Three processes against one process of three devices (sums of three: within the tolerance).
    three = mpi_job(3, '--devices', 'cpu:0')
    one3 = subprocess.run(train_args('--devices', 'cpu:0,cpu:1,cpu:2'), capture_output=True, text=True, timeout=240)
    a, b = last_json(one3.stdout), last_json(three.stdout)
    expect(three.returncode == 0 and a is not None and b is not None and b['processes'] == 3,
           'mpi backend, 3 processes: trains', three.stdout + three.stderr + one3.stderr)
    if a and b:
        for key in ('train_loss', 'test_loss'):
            expect(abs(a[key] - b[key]) <= 1e-4 * max(1.0, abs(a[key])),
                   f'mpi backend, {key}: 3 processes x 1 device as 1 x 3 ({b[key]} vs {a[key]})')

    # A rank killed mid-training: mpirun ends the job non-zero.
    kill_rank_under_mpirun([mpirun, '--allow-run-as-root', '--oversubscribe', '-np', '2', '-x',
                            f'MASTER_PORT={free_port()}', '-x', 'DP_BACKEND=mpi']
                           + train_args('--devices', 'cpu:0', epochs=1000), 'mpi backend', env=mpi_env)

    # A rank that stops answering (SIGSTOP) mid-step: the survivor's collective reaches
    # DP_COMM_TIMEOUT, it says so and ends the job (MPI_Abort), rather than waiting forever.
    kill_rank_under_mpirun([mpirun, '--allow-run-as-root', '--oversubscribe', '-np', '2', '-x',
                            f'MASTER_PORT={free_port()}', '-x', 'DP_BACKEND=mpi', '-x', 'DP_COMM_TIMEOUT=3']
                           + train_args('--devices', 'cpu:0', epochs=1000), 'mpi backend', env=mpi_env,
                           sig=signal.SIGSTOP, says=('no answer within 3 s (DP_COMM_TIMEOUT)', 'ending the MPI job'))

    # Ctrl-C to mpirun's terminal: every rank stops after the same step, rank 0 writes the checkpoint.
    ctrl_c_under_mpirun([mpirun, '--allow-run-as-root', '--oversubscribe', '-np', '2', '-x',
                         f'MASTER_PORT={free_port()}', '-x', 'DP_BACKEND=mpi'], 'mpi backend', env=mpi_env)

    # A plugin layer that throws in a step's forward: the rank prints the plugin's error and the job
    # ends non-zero, within seconds (Open MPI cannot fail one collective: docs/distributed.md).
    throws = os.path.join(os.path.dirname(DP), '..', '..', 'tests', 'plugins', 'fixture_throws.so')
    if os.path.exists(throws):
        model = f'{tmp}/throws.json'
        with open(model, 'w') as f:
            json.dump({'input': {'shape': [1, 28, 28]}, 'loss': {'type': 'cross_entropy'},
                       'layers': [{'type': 'flatten'}, {'type': 'throws', 'throw_in': 'forward', 'at_step': 3},
                                  {'type': 'linear', 'out_features': 10}]}, f)
        started = time.time()
        p = subprocess.run([mpirun, '--allow-run-as-root', '--oversubscribe', '-np', '2', '-x', f'MASTER_PORT={free_port()}',
                            '-x', 'DP_BACKEND=mpi', '-x', 'DP_COMM_TIMEOUT=30', DP, 'train', model, '--plugin', throws,
                            '--data', 'synthetic:600', '--batch-size', '30', '--epochs', '2', '--workers', '0'],
                           capture_output=True, text=True, timeout=240, env=mpi_env)
        took = time.time() - started
        expect(p.returncode != 0 and 'forward threw: thrown in forward on purpose' in p.stderr
               and 'ending the MPI job' in p.stderr and took < 120,
               f'mpi backend, a plugin that throws mid-step: the job ends non-zero in {took:.0f} s, saying why',
               p.stdout + p.stderr)
    else:
        print(f'{throws} not built: the plugin case of the mpi backend skipped')

    # Without mpirun: a clear error on every rank, not a hang.
    res = finish(start_ranks(train_args('--devices', 'cpu:0', epochs=1), 2, free_port(), DP_BACKEND='mpi'), timeout=60)
    expect(all(rc == 1 and 'the mpi backend runs under mpirun' in e for rc, _, e in res),
           'DP_BACKEND=mpi without mpirun: exit 1 saying so', res[0][2] + res[1][2])
    bad = subprocess.run(train_args('--devices', 'cpu:0', epochs=1), env=rank_env(0, 2, free_port(), DP_BACKEND='tcp'),
                         capture_output=True, text=True, timeout=60)
    expect(bad.returncode == 2 and 'DP_BACKEND="tcp": expected gloo or mpi' in bad.stderr,
           'DP_BACKEND=tcp: refused (exit 2, a usage error) naming the choices', bad.stderr)
elif mpirun:
    print('dp built without Open MPI (libopenmpi-dev): the mpi backend\'s cases skipped')

shutil.rmtree(tmp, ignore_errors=True)
print(f'{passed} passed, {failed} failed')
sys.exit(1 if failed else 0)
