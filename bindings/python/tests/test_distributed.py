"""Training across processes: dp.init_process_group, dp.DistributedDataParallel
and sharded loaders. Two worker processes of one CPU device each train as one
process of two devices does; the workers are this file run as a script."""
import datetime
import json
import os
import random
import socket
import shutil
import subprocess
import sys

import numpy as np
import pytest

import dp

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_PARENT = os.path.dirname(HERE)  # bindings/python, holding the package dp

SPEC = {'seed': 11, 'input': {'shape': [6]},
        'layers': [{'type': 'linear', 'out_features': 16}, {'type': 'tanh'}, {'type': 'dropout', 'p': 0.2},
                   {'type': 'linear', 'out_features': 3}],
        'loss': {'type': 'cross_entropy'}}
# 49 rows in batches of 8: the last global batch has 1 row, so rank 1's share
# of it is 0 rows (torch.chunk's rule over the 2 devices: 1 and 0).
N, BATCH, EVAL_BATCH, SEED = 49, 8, 16, 7
LAUNCH_VARS = ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT',
               'OMPI_COMM_WORLD_RANK', 'OMPI_COMM_WORLD_SIZE', 'OMPI_COMM_WORLD_LOCAL_RANK',
               'OMPI_COMM_WORLD_LOCAL_SIZE', 'SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_LOCALID', 'SLURM_NTASKS_PER_NODE')


def data():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((N, 6)).astype(np.float32)
    y = (np.argmax(x[:, :3], axis=1) + (x[:, 3] > 1)).astype(np.int64) % 3
    return x, y


def train(net, shard):
    """One epoch of SGD with momentum, then an evaluation: (losses, local rows
    per batch, [(loss, correct)] per evaluation batch)."""
    x, y = data()
    ds = dp.Dataset.from_arrays(x, y)
    opt = dp.SGD(net, lr=0.1, momentum=0.9)
    loader = dp.DataLoader(ds, batch_size=BATCH, shuffle=True, seed=SEED, num_workers=1,
                           shard=net if shard else None)
    losses, rows = [], []
    for bx, by in loader:
        rows.append(int(bx.shape[0]))
        assert bx.shape[1:] == (6,) and by.shape == (bx.shape[0],)
        losses.append(net.train_step(opt, bx, by))
    net.eval()
    evals = [net.evaluate(bx, by) for bx, by in dp.DataLoader(ds, batch_size=EVAL_BATCH, shard=net if shard else None)]
    net.train()
    return opt, loader, losses, rows, evals


def momentum_of(opt):
    return np.concatenate([st['momentum_buffer'].ravel() for st in opt.state_dict()['state'].values()])


def worker(mode, rank, port, out):
    """A rank of a world of 2 (this file run as a script): joins the default
    group as `mode` says, trains, checkpoints, and writes what it saw to out."""
    try:
        if mode == 'env':  # as torchrun launches it: the environment only
            pg = dp.init_process_group(timeout=datetime.timedelta(seconds=60))
        elif mode == 'mpi':  # as mpirun launches it, on Open MPI's collectives
            pg = dp.init_process_group('mpi', timeout=60)
            rank = dp.get_rank()
        elif rank == 0:
            pg = dp.init_process_group('gloo', world_size=2, rank=0, master_addr='127.0.0.1', master_port=port,
                                       timeout=60)
        else:
            # No local_rank (processes started by hand): the group counts it from host names.
            pg = dp.init_process_group(init_method=f'tcp://127.0.0.1:{port}', world_size=2, rank=1, timeout=60)
    except dp.IOError:
        sys.exit(3)  # rank 0 could not listen on the port: the test picks another
    info = {'rank': dp.get_rank(), 'world_size': dp.get_world_size(), 'local_rank': dp.get_local_rank(),
            'initialized': dp.is_initialized(), 'local_world_size': pg.local_world_size,
            'auto': dp._distributed._process_devices('auto', pg)}
    net = dp.DistributedDataParallel(dp.Model(SPEC), 'cpu:0')
    info['global_devices'] = net.global_devices
    info['repr'] = repr(net).splitlines()[0]
    pg.check_same('script flag', 'a')
    try:
        pg.check_same('epochs', str(rank))
        info['differs'] = None
    except dp.InvalidArgumentError as e:
        info['differs'] = str(e)
    opt, loader, losses, rows, evals = train(net, shard=True)
    params = net.model.parameters()
    momentum = momentum_of(opt)
    opt.load_state_dict(opt.state_dict())  # each rank holds the whole state: no checkpoint needed
    ckpt = os.path.join(out, 'ckpt.safetensors')
    dp.save_checkpoint(ckpt, net, opt, loader, {'rank': rank})  # collective: rank 0 writes
    dp.barrier()
    dp.load_checkpoint(ckpt, net, opt, loader)  # every rank reads
    info['checkpoint_metadata_rank'] = dp.checkpoint_metadata(ckpt)['rank']
    info['loader_position'] = loader.position
    # Stopping together: rank 1 asks; after the next job every rank knows.
    info['stop_before'] = dp.stop_requested()
    if rank == 1:
        dp.request_stop()
    x, y = data()
    shard = slice(0, 4) if rank == 0 else slice(4, 8)  # each rank's rows of one global batch of 8
    net.evaluate(x[shard], y[shard])
    info['stop_after'] = (dp.stop_requested(), pg.stop_requested())
    np.savez(os.path.join(out, f'rank{rank}.npz'), params=params, after_load=net.model.parameters(), momentum=momentum,
             losses=np.array(losses), rows=np.array(rows), evals=np.array(evals))
    with open(os.path.join(out, f'rank{rank}.json'), 'w') as f:
        json.dump(info, f)
    dp.barrier()
    dp.destroy_process_group()
    info['initialized_after'] = dp.is_initialized()
    with open(os.path.join(out, f'rank{rank}.json'), 'w') as f:
        json.dump(info, f)


def free_port():
    """A random port in [20000, 32000) that binds on loopback now."""
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(20000, 32000)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(('127.0.0.1', port))
            except OSError:
                continue
            return port
    raise RuntimeError('no free port in [20000, 32000)')


def launch(mode, out):
    """Runs the two ranks; retries on another port when rank 0 could not listen."""
    for _ in range(3):
        port = free_port()
        procs = []
        if mode == 'mpi':
            env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS and k != 'DP_COMM_TIMEOUT'}
            env['PYTHONPATH'] = os.pathsep.join([PACKAGE_PARENT] + [p for p in [os.environ.get('PYTHONPATH')] if p])
            p = subprocess.run([shutil.which('mpirun'), '--allow-run-as-root', '--oversubscribe', '-np', '2', '-x',
                                f'MASTER_PORT={port}', sys.executable, os.path.abspath(__file__), mode, '-1', str(port),
                                out], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
            if p.returncode == 3:
                continue
            if 'built without Open MPI' in p.stdout:
                pytest.skip('libdp was built without Open MPI: no mpi backend')
            assert p.returncode == 0, p.stdout
            return
        for rank in range(2):
            env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS and k != 'DP_COMM_TIMEOUT'}
            env['PYTHONPATH'] = os.pathsep.join([PACKAGE_PARENT] + [p for p in [os.environ.get('PYTHONPATH')] if p])
            if mode == 'env':
                env.update(RANK=str(rank), WORLD_SIZE='2', LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE='2',
                           MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), mode, str(rank), str(port), out],
                                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outputs = []
        try:
            for p in procs:
                outputs.append(p.communicate(timeout=90)[0])
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        codes = [p.returncode for p in procs]
        if codes[0] == 3:
            continue
        assert codes == [0, 0], '\n'.join(f'rank {r} exited with {c}:\n{o}' for r, (c, o) in
                                          enumerate(zip(codes, outputs)))
        return
    pytest.fail('rank 0 could not listen on three random ports')


@pytest.fixture(scope='module')
def reference():
    """One process, two devices: what the two processes must reproduce."""
    net = dp.DataParallel(dp.Model(SPEC), 'cpu:0,cpu:1')
    opt, _, losses, rows, evals = train(net, shard=False)
    return net.model.parameters(), losses, rows, evals, momentum_of(opt)


@pytest.mark.parametrize('mode', ['env', 'args', 'mpi'])
def test_two_processes_train_as_one_process_of_two_devices(tmp_path, reference, mode):
    if mode == 'mpi' and not shutil.which('mpirun'):
        pytest.skip('no mpirun (Debian\'s openmpi-bin)')
    launch(mode, str(tmp_path))
    ranks = [np.load(tmp_path / f'rank{r}.npz') for r in range(2)]
    infos = [json.loads((tmp_path / f'rank{r}.json').read_text()) for r in range(2)]
    ref_params, ref_losses, ref_rows, ref_evals, ref_momentum = reference
    for r, info in enumerate(infos):
        assert info['rank'] == r and info['world_size'] == 2 and info['local_rank'] == r
        assert info['initialized'] and not info['initialized_after']
        assert info['global_devices'] == [2, r]
        assert info['differs'] == "rank 1's epochs differs from rank 0's: rank 0 has 0, rank 1 has 1"
        assert info['repr'].startswith(f"DistributedDataParallel(rank={r}, devices='cpu:0', module=dp.Model(input ")
        # "auto": this process's share of the cores (2 processes here: from
        # LOCAL_WORLD_SIZE, or the loopback master address).
        assert info['local_world_size'] == 2
        assert info['auto'] == ','.join(f'cpu:{i}' for i in range(max(1, (os.cpu_count() or 1) // 2)))
        assert info['checkpoint_metadata_rank'] == '0'  # rank 0 wrote the checkpoint
        assert info['loader_position'] == [1, 0]
        assert info['stop_before'] == 0 and info['stop_after'] == [1, 1]  # rank 1's request, on both after one job
    # Every rank holds the same parameters, bitwise, and the global batch's losses.
    assert np.array_equal(ranks[0]['params'], ranks[1]['params'])
    assert np.array_equal(ranks[0]['losses'], ranks[1]['losses'])
    assert np.array_equal(ranks[0]['evals'], ranks[1]['evals'])
    # Each rank read its rows of each global batch; the last has 1 row, rank 1's share none.
    assert ref_rows == [8] * 6 + [1]
    assert ranks[0]['rows'].tolist() == [4] * 6 + [1] and ranks[1]['rows'].tolist() == [4] * 6 + [0]
    # 2 processes x 1 device == 1 process x 2 devices.
    np.testing.assert_allclose(ranks[0]['params'], ref_params, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(ranks[0]['losses'], ref_losses, rtol=1e-5)
    np.testing.assert_allclose(ranks[0]['evals'], ref_evals, rtol=1e-5)
    # The optimizer's state_dict on every rank: the same, bitwise, and the one process's.
    assert np.array_equal(ranks[0]['momentum'], ranks[1]['momentum'])
    np.testing.assert_allclose(ranks[0]['momentum'], ref_momentum, rtol=1e-5, atol=1e-6)
    # load_checkpoint on every rank restored what rank 0 saved.
    for r in range(2):
        assert np.array_equal(ranks[r]['after_load'], ranks[0]['params'])


def test_not_initialized():
    assert not dp.is_initialized()
    for fn in (dp.get_rank, dp.get_world_size, dp.get_local_rank, dp.barrier, dp.destroy_process_group):
        with pytest.raises(ValueError, match='init_process_group'):
            fn()
    with pytest.raises(ValueError, match='init_process_group'):
        dp.DistributedDataParallel(dp.Model(SPEC))


def test_init_errors():
    with pytest.raises(dp.ModelError, match='rank'):
        dp.init_process_group(world_size=2, rank=2)
    with pytest.raises(dp.ModelError):
        dp.init_process_group(world_size=2, rank=0, master_port=70000)
    with pytest.raises(ValueError, match='gloo'):
        dp.init_process_group('tcp')
    with pytest.raises(ValueError, match='tcp://'):
        dp.init_process_group(init_method='file:///tmp/dp-rendezvous')
    with pytest.raises(ValueError, match='not both'):
        dp.init_process_group(init_method='tcp://127.0.0.1:29500', master_port=29501)
    with pytest.raises(TypeError):
        dp.init_process_group(rank=0.5, world_size=2)
    assert not dp.is_initialized()


def test_config_from_arguments(monkeypatch):
    cfg = dp._distributed._config
    for v in LAUNCH_VARS:
        monkeypatch.delenv(v, raising=False)
    assert cfg(None, None, None, None, None, None, None) == {}
    # init_method="env://" named: RANK and WORLD_SIZE expected, as torch.distributed's (without a
    # launcher it was a world of one, silently).
    with pytest.raises(ValueError, match='environment variable RANK expected'):
        cfg('env://', None, -1, -1, None, None, None)
    with pytest.raises(ValueError, match='environment variable WORLD_SIZE expected'):
        cfg('env://', None, -1, 0, None, None, None)
    assert cfg('env://', None, 2, 0, None, None, None) == {'rank': 0, 'world_size': 2}
    monkeypatch.setenv('OMPI_COMM_WORLD_RANK', '0')
    monkeypatch.setenv('OMPI_COMM_WORLD_SIZE', '1')
    assert cfg('env://', None, -1, -1, None, None, None) == {}
    assert cfg('tcp://10.0.0.1:23456?rank=1&world_size=4', datetime.timedelta(minutes=2), None, None, 1, None,
               None) == {'master_addr': '10.0.0.1', 'master_port': 23456, 'rank': 1, 'world_size': 4,
                         'local_rank': 1, 'timeout_s': 120.0}
    assert cfg(None, 5, 2, 0, None, 'localhost', np.int64(29400)) == {
        'world_size': 2, 'rank': 0, 'master_addr': 'localhost', 'master_port': 29400, 'timeout_s': 5.0}


def test_peer_that_never_comes_is_a_comm_error():
    with pytest.raises(dp.CommError):
        dp.init_process_group(world_size=2, rank=1, master_port=free_port(), timeout=1)
    assert not dp.is_initialized()


def test_world_of_one(tmp_path, monkeypatch):
    for v in LAUNCH_VARS:
        monkeypatch.delenv(v, raising=False)
    pg = dp.init_process_group()
    try:
        assert dp.is_initialized() and isinstance(pg, dp.ProcessGroup)
        assert (dp.get_rank(), dp.get_world_size(), dp.get_local_rank()) == (0, 1, 0)
        assert pg.local_world_size == 1
        dp.barrier()
        with pytest.raises(ValueError, match='twice'):
            dp.init_process_group()
        net = dp.DistributedDataParallel(dp.Model(SPEC), 'cpu:0,cpu:1')
        assert net.process_group is pg and net.global_devices == (2, 0)
        # PyTorch's keywords: device_ids, output_device, dim and the hints it takes
        ddp = dp.DistributedDataParallel(dp.Model(SPEC), device_ids=['cpu:0'], output_device='cpu:0', dim=0,
                                         find_unused_parameters=True, gradient_as_bucket_view=True, static_graph=True)
        assert ddp.global_devices == (1, 0)
        with pytest.warns(UserWarning, match='bucket_cap_mb=25 is ignored'):
            dp.DistributedDataParallel(dp.Model(SPEC), 'cpu:0', bucket_cap_mb=25)
        for bad, what in [(dict(broadcast_buffers=False), 'the same on every process'),
                          (dict(init_sync=False), "rank 0's parameters"), (dict(dim=1), 'dim 0 only'),
                          (dict(output_device='cpu:1'), 'first device, cpu:0')]:
            with pytest.raises(dp.UnsupportedError, match=what):
                dp.DistributedDataParallel(dp.Model(SPEC), 'cpu:0', **bad)
        with pytest.raises(dp.ArgumentTypeError, match='not both'):
            dp.DistributedDataParallel(dp.Model(SPEC), 'cpu:0', device_ids=['cpu:0'])
        with pytest.raises(TypeError, match='DistributedDataParallel'):
            dp.DataLoader(dp.Dataset.from_arrays(*data()), batch_size=8, shard=net.model)
        _, _, losses, rows, _ = train(net, shard=True)  # a world of one: the whole batch
        assert rows == [8] * 6 + [1]
        dp.save_checkpoint(tmp_path / 'c.safetensors', net)
        dp.load_checkpoint(tmp_path / 'c.safetensors', net)
        assert dp.stop_requested() == 0
        dp.request_stop()  # a world of one: agreed at once
        assert dp.stop_requested() == 1 and pg.stop_requested() == 1
    finally:
        dp.destroy_process_group()
    assert not dp.is_initialized()
    dp.init_process_group('nccl')  # PyTorch's name for GPUs: dp's groups on GPUs use NCCL anyway
    dp.destroy_process_group()
    with pytest.raises(ValueError, match='destroyed'):
        pg.barrier()


if __name__ == '__main__':
    worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
