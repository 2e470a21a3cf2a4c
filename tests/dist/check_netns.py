#!/usr/bin/env python3
"""`dp train` across a real network stack: two ranks in two network
namespaces joined by a veth pair, so that nothing goes over loopback. Rank 0
serves the store on its veth address (MASTER_ADDR); both ranks then connect
with Gloo. Checks that both exit 0, that rank 0 reports 2 processes and 2
devices, that rank 1 prints nothing, and that the test loss is that of one
process with both devices (within 1e-4 relative).

Needs root, `ip` and veth support; exits 77 (skipped) without them. The
namespaces are removed at the end, whatever happens.

    check_netns.py BUILD/src/cli/dp MODEL.json
"""
import json
import os
import shutil
import signal
import subprocess
import sys

DP = os.path.abspath(sys.argv[1])
MODEL = os.path.abspath(sys.argv[2])
PID = os.getpid()
NS = [f'dp_netns_a_{PID}', f'dp_netns_b_{PID}']
VETH = [f'dpa{PID}', f'dpb{PID}']  # at most 15 characters
ADDR = [f'10.231.{PID % 256}.1', f'10.231.{PID % 256}.2']
PORT = 29400 + PID % 500
created = []  # the namespaces to remove


def skip(why):
    print(f'skipped: {why}')
    sys.exit(77)


def ip(*args):
    return subprocess.run(['ip', *args], capture_output=True, text=True)


def train_args(*extra):
    return [DP, 'train', MODEL, '--data', 'synthetic:600', '--batch-size', '30', '--epochs', '1',
            '--workers', '0', '--seed', '4', *extra]


def rank_env(rank):
    return dict(os.environ, RANK=str(rank), WORLD_SIZE='2', LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE='2',
                MASTER_ADDR=ADDR[0], MASTER_PORT=str(PORT), DP_COMM_TIMEOUT='30')


def last_json(text):
    lines = [l for l in text.strip().splitlines() if l.startswith('{')]
    return json.loads(lines[-1]) if lines else None


def finish(p, timeout=240):
    try:
        o, e = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        o, e = p.communicate()
        e += '\n(killed at the test deadline)'
    return p.returncode, o, e


def setup():
    if os.geteuid() != 0:
        skip('network namespaces need root')
    if not shutil.which('ip'):
        skip('no `ip` (iproute2)')
    for ns in NS:
        r = ip('netns', 'add', ns)
        if r.returncode:
            skip(f'`ip netns add` failed: {r.stderr.strip()}')
        created.append(ns)
    r = ip('link', 'add', VETH[0], 'netns', NS[0], 'type', 'veth', 'peer', 'name', VETH[1], 'netns', NS[1])
    if r.returncode:
        skip(f'no veth pair: {r.stderr.strip()}')
    for ns, dev, addr in zip(NS, VETH, ADDR):
        for cmd in (['addr', 'add', f'{addr}/24', 'dev', dev], ['link', 'set', dev, 'up'], ['link', 'set', 'lo', 'up']):
            r = ip('-n', ns, *cmd)
            if r.returncode:
                skip(f'`ip -n {ns} {" ".join(cmd)}` failed: {r.stderr.strip()}')


def cleanup():
    for ns in created:
        ip('netns', 'del', ns)  # the veth pair goes with its namespaces


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # meson's timeout: clean up too
    failed = []

    def expect(cond, what, detail=''):
        if not cond:
            failed.append(what)
            print(f'FAILED: {what}\n{detail}')

    setup()
    procs = [subprocess.Popen(['ip', 'netns', 'exec', NS[r], *train_args('--devices', 'cpu:0')], env=rank_env(r),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    try:
        res = [finish(p) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    (rc0, out0, err0), (rc1, out1, err1) = res
    expect(rc0 == 0 and rc1 == 0, f'ranks in namespaces {ADDR[0]} and {ADDR[1]}: both exit 0',
           f'rank 0 (exit {rc0}):\n{err0}\nrank 1 (exit {rc1}):\n{err1}')
    if '[127.' in err0 + err1:
        print(f'(Gloo offered its peer a loopback address, not one on the veth link: it binds to what the\n'
              f' hostname {os.uname().nodename!r} resolves to unless MASTER_ADDR is loopback; see gloo_comm.cpp)')
    got = last_json(out0)
    expect(got is not None and got.get('processes') == 2 and got.get('devices') == 2,
           'rank 0 reports 2 processes, 2 devices', out0)
    expect(out1.strip() == '', 'rank 1 prints nothing', out1)

    one = subprocess.run(train_args('--devices', 'cpu:0,cpu:1'), capture_output=True, text=True, timeout=240)
    expect(one.returncode == 0, 'one process, two devices: exit 0', one.stderr)
    ref = last_json(one.stdout)
    if ref and got:
        a, b = ref['test_loss'], got['test_loss']
        expect(abs(a - b) <= 1e-4 * max(1.0, abs(a)), f'test_loss: 2 namespaces x 1 device as 1 x 2 ({b} vs {a})')
    print('passed' if not failed else f'{len(failed)} failed')
    return 1 if failed else 0


if __name__ == '__main__':
    try:
        sys.exit(main())
    finally:
        cleanup()
