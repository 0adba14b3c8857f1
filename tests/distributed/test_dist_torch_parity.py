"""DistributedDataParallel and the collectives against torch's (gloo) as the specification: the same
script (torch_parity_worker.py) runs as two real processes under each library, started as torchrun
starts them (init_process_group("gloo", init_method="env://" or "tcp://...") with RANK / WORLD_SIZE /
MASTER_ADDR / MASTER_PORT), and every rank's
parameters, gradients, buffers, collective results (values and dtypes) and wrapper facts agree in
f64. Then, in-process (this process as rank 0 of two mirrored ranks), the wrapper's choices that a
traced step makes: buffers broadcast before every forward, an unused parameter without
find_unused_parameters an error, with it a .grad left as it was."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import flame
import flame.distributed as dist
import flame.nn as nn
from flame.nn.parallel import DistributedDataParallel
from tests.distributed.launch import free_port, kill_all, start_ranks
from tests.distributed.test_dist_collectives import two_ranks  # noqa: F401 - the fixture

torch = pytest.importorskip("torch")

WAIT = 120  # seconds: a hang fails the test instead of stalling the suite


def _run(tmp: Path, lib: str, *args: str, port: int | None = None, **env: str) -> list[tuple[dict, dict]]:
    """Both ranks of torch_parity_worker.py under `lib`: each rank's (arrays, facts)."""
    out = tmp / lib
    out.mkdir()
    procs = start_ranks(
        "torch_parity_worker.py", "--lib", lib, "--out", str(out), *args, world=2, out=out, port=port, **env
    )
    try:
        for p in procs:
            p.wait(timeout=WAIT)
    finally:
        kill_all(procs)
    logs = "\n".join((out / f"rank{r}.log").read_text() for r in range(2))
    assert [p.returncode for p in procs] == [0, 0], logs
    return [(dict(np.load(out / f"rank{r}.npz")), json.loads((out / f"rank{r}.json").read_text())) for r in range(2)]


@pytest.fixture(scope="module")
def torch_ranks(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("torch"), "torch")


def _compare(torch_ranks, flame_ranks) -> None:
    for r, ((ta, tf), (fa, ff)) in enumerate(zip(torch_ranks, flame_ranks)):
        assert sorted(fa) == sorted(k for k in ta if k in fa) and fa, f"rank {r}"
        for k in fa:
            assert fa[k].dtype == ta[k].dtype and fa[k].shape == ta[k].shape, (r, k, fa[k], ta[k])
            np.testing.assert_allclose(fa[k], ta[k], rtol=1e-10, atol=1e-12, err_msg=f"rank {r}: {k}")
        assert ff == {k: v for k, v in tf.items() if k in ff}, f"rank {r}"


def test_eager_ddp_and_collectives_match_torch(torch_ranks, tmp_path):
    flame_ranks = _run(tmp_path, "flame")
    assert sorted(flame_ranks[0][0]) == sorted(torch_ranks[0][0])
    _compare(torch_ranks, flame_ranks)
    facts = flame_ranks[1][1]
    assert facts["strict_next_forward"] == "RuntimeError=True" and facts["strict_grad_of_unused"] == "None"
    assert facts["state_dict_keys"][0] == "module.0.weight" and facts["rank"] == 1 and facts["world"] == 2
    assert facts["backend"] == "gloo"
    assert np.isnan(flame_ranks[0][0]["unused/step1/grad/c.weight"])  # no rank used it: .grad stays None


def test_compiled_ddp_steps_match_torch(torch_ranks, tmp_path):
    port = free_port()  # the store's, named by init_method alone: MASTER_ADDR and MASTER_PORT lead nowhere
    tcp = ("--init-method", f"tcp://127.0.0.1:{port}")
    flame_ranks = _run(tmp_path, "flame", "--compile", *tcp, port=1, MASTER_ADDR="unreachable.invalid")
    assert any(k.startswith("bn/") for k in flame_ranks[0][0]) and "coll/all_gather/int64" in flame_ranks[0][0]
    _compare(torch_ranks, flame_ranks)


# ---- in-process: what the wrapper adds to a traced step --------------------------------------------


def _bn_model():
    gen = flame.Generator(0)
    return nn.Sequential(nn.Linear(4, 5, generator=gen), nn.BatchNorm1d(5), nn.Linear(5, 2, generator=gen))


@pytest.mark.parametrize("sync", [True, False])
def test_buffers_are_broadcast_before_every_forward(two_ranks, sync):  # noqa: F811
    model = _bn_model()
    ddp = DistributedDataParallel(model, forward_sync_buffers=sync)
    opt = flame.optim.SGD(ddp.parameters(), lr=0.1)

    def step(x):
        loss = (ddp(x) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    x = flame.randn(6, 4, generator=flame.Generator(1))
    g = flame.compile(step).optimized(x)
    names = [op.name for op in g.ops]
    buffers = len(list(model.buffers()))
    assert names.count("broadcast") == (buffers if sync else 0)
    if sync:
        assert max(i for i, n in enumerate(names) if n == "broadcast") < names.index("matmul")


def _branches():
    class Branches(nn.Module):
        def __init__(self):
            super().__init__()
            gen = flame.Generator(0)
            self.a, self.b = nn.Linear(4, 3, generator=gen), nn.Linear(4, 3, generator=gen)

        def forward(self, x):
            return self.a(x)

    return Branches()


def test_unused_parameter_without_find_unused_parameters_fails_the_next_forward(two_ranks):  # noqa: F811
    ddp = DistributedDataParallel(_branches())
    x = flame.randn(2, 4, generator=flame.Generator(1))
    ddp(x).sum().backward()
    assert ddp.module.b.weight.grad is None and ddp.module.a.weight.grad is not None
    with flame.no_grad():
        ddp(x)  # a forward that records nothing starts no reduction: no error yet, as torch's
    with ddp.no_sync():
        ddp(x)
    with pytest.raises(dist.DistributedError, match=r"not used in producing the loss.*2 \(b.weight\), 3 \(b.bias\)"):
        ddp(x)
    assert issubclass(dist.DistributedError, RuntimeError)  # what torch raises


def test_unused_parameter_without_find_unused_parameters_fails_the_trace(two_ranks):  # noqa: F811
    ddp = DistributedDataParallel(_branches())

    @flame.compile
    def step(x):
        ddp(x).sum().backward()

    with pytest.raises(dist.DistributedError, match="find_unused_parameters=True"):
        step(flame.randn(2, 4, generator=flame.Generator(1)))


def test_find_unused_parameters_leaves_the_grad_of_a_parameter_no_rank_used(two_ranks):  # noqa: F811
    ddp = DistributedDataParallel(_branches(), find_unused_parameters=True)
    x = flame.randn(2, 4, generator=flame.Generator(1))
    ddp(x).sum().backward()
    assert ddp.module.b.weight.grad is None and ddp.module.b.bias.grad is None
    np.testing.assert_allclose(ddp.module.a.bias.grad.numpy(), [2.0, 2.0, 2.0])
    ddp(x)  # no error: the flag allows unused parameters


def test_constructor_arguments_are_torchs(two_ranks):  # noqa: F811
    with pytest.raises(TypeError):
        DistributedDataParallel(_branches(), find_unused_parameter=True)  # a misspelt argument
    with pytest.warns(FutureWarning, match="broadcast_buffers"):
        ddp = DistributedDataParallel(_bn_model(), broadcast_buffers=False)
    assert not ddp.broadcast_buffers and not ddp.forward_sync_buffers
    ddp = DistributedDataParallel(_bn_model(), bucket_cap_mb=None, static_graph=True, gradient_as_bucket_view=True)
    assert ddp.bucket_cap_mb == 25.0 and ddp.broadcast_buffers
    with pytest.raises(flame.FlameError, match="process_group is not supported"):
        DistributedDataParallel(_bn_model(), process_group=object())
    frozen = _bn_model().requires_grad_(False)
    with pytest.raises(RuntimeError, match="doesn't have any parameter that requires a gradient"):
        DistributedDataParallel(frozen)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"init_method": "file:///tmp/rendezvous"}, r"init_method='file:///tmp/rendezvous' is not supported"),
        ({"init_method": "tcp://127.0.0.1"}, r"expected 'env://' or 'tcp://HOST:PORT'"),
        ({"store": object()}, r"store= is not supported"),
        ({"backend": "mpi"}, r"unknown backend 'mpi'"),
    ],
)
def test_init_process_group_arguments_flame_lacks_are_clear_errors(kwargs, message):
    with pytest.raises(dist.DistributedError, match=message):
        dist.init_process_group(**{"backend": "gloo", **kwargs})
    assert not dist.is_initialized()


def test_init_process_group_takes_torchs_positional_arguments_and_unset_ranks(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    dist.init_process_group("gloo", "env://", 30.0, -1, -1)
    try:
        assert dist.get_backend() == "gloo" and dist.get_world_size() == 1 and dist.get_rank() == 0
    finally:
        dist.destroy_process_group()
