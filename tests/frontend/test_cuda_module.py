"""flame.cuda: torch.cuda's everyday names; on a machine without a GPU, torch's answers."""

import pytest

import flame


def test_device_selection_line_works_everywhere():
    assert flame.cuda.is_available() == flame.runtime.device.cuda_available()
    device = "cuda" if flame.cuda.is_available() else "cpu"
    x = flame.ones(2).to(device)
    assert x.device.type == device
    assert flame.cuda.device_count() == (0 if not flame.cuda.is_available() else flame.cuda.device_count())
    flame.cuda.manual_seed(3)
    a = flame.rand(4).numpy()
    flame.cuda.manual_seed_all(3)
    assert (flame.rand(4).numpy() == a).all()


@pytest.mark.skipif(flame.runtime.device.cuda_available(), reason="checks the answers without a GPU")
def test_without_a_gpu_the_gpu_calls_say_so():
    assert flame.cuda.device_count() == 0
    for call in (flame.cuda.synchronize, flame.cuda.max_memory_allocated, flame.cuda.Event, flame.cuda.Stream):
        with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
            call()


def test_a_missing_name_points_at_the_migration_page():
    with pytest.raises(AttributeError, match="coming_from_pytorch"):
        flame.no_such_thing  # noqa: B018


@pytest.mark.gpu
def test_memory_statistics_events_and_streams_on_the_gpu():
    flame.set_device("cuda")
    flame.cuda.synchronize()
    flame.cuda.reset_peak_memory_stats()
    base = flame.cuda.memory_allocated()
    x = flame.ones(1 << 20)  # 4 MiB
    assert flame.cuda.memory_allocated() >= base + 4 * (1 << 20)
    del x
    assert flame.cuda.max_memory_allocated() >= base + 4 * (1 << 20)
    flame.cuda.reset_peak_memory_stats()
    assert flame.cuda.max_memory_allocated() < base + 4 * (1 << 20)
    start, end = flame.cuda.Event(enable_timing=True), flame.cuda.Event(enable_timing=True)
    s = flame.cuda.Stream()
    with flame.cuda.stream(s):
        start.record(s)
        y = (flame.ones(1 << 16) * 2).sum()
        end.record(s)
    s.synchronize()
    assert end.query() and start.elapsed_time(end) >= 0.0
    assert y.item() == 2 * (1 << 16)
    assert flame.cuda.get_device_name().startswith("NVIDIA")
