"""`pygraph.op_support` without a GPU: what a torch op's call does on a CUDA device, with torch's
CUDA calls replaced by recorders. A call launches on torch's current stream (read raw, as an int),
hands a backend plan this thread's handle, allocates only the workspace (from torch), and never
waits on a stream, records an event, synchronizes or builds a torch.cuda.Stream; a graph build asked
for while the current stream captures a CUDA graph raises `StreamCaptureError` naming the call and
the graph, and a built graph is served inside a capture. The device run of the same (a real capture
and replay of every op) is each family's ``test_*_capture_sm90.py``."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pygraph import op_support  # noqa: E402
from pygraph.errors import StreamCaptureError  # noqa: E402

CUDA0 = torch.device("cuda", 0)


class RecordingGraph:
    """Stands in for a built pygraph.Graph: records each execute's arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def execute(self, pack, workspace=None, handle=None, *, stream=None) -> None:
        self.calls.append((pack, workspace, handle, stream))


def _forbidden(name):
    def call(*args, **kwargs):
        raise AssertionError(f"{name} called on the per-call path")

    return call


@pytest.fixture
def cuda_calls(monkeypatch):
    """torch's current stream on device i is 0x5EED0 + i, the current device 0; every call that
    would order streams, synchronize or build a Stream object raises; workspaces are host tensors
    (recorded by size)."""
    monkeypatch.setattr(op_support, "_raw_stream", lambda index: 0x5EED0 + index)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    for name in ("synchronize", "current_stream", "default_stream", "stream", "set_stream"):
        monkeypatch.setattr(torch.cuda, name, _forbidden(f"torch.cuda.{name}"))
    monkeypatch.setattr(torch.cuda.Stream, "wait_stream", _forbidden("Stream.wait_stream"))
    monkeypatch.setattr(torch.cuda.Stream, "wait_event", _forbidden("Stream.wait_event"))
    monkeypatch.setattr(torch.cuda.Stream, "synchronize", _forbidden("Stream.synchronize"))
    monkeypatch.setattr(torch.cuda.Event, "record", _forbidden("Event.record"))
    sizes: list[int] = []

    def workspace(nbytes, device):
        sizes.append(nbytes)
        return torch.empty(nbytes, dtype=torch.uint8)

    monkeypatch.setattr(op_support, "_workspace", workspace)
    return sizes


def test_a_call_launches_on_torchs_current_stream_and_nothing_else(cuda_calls):
    graph = RecordingGraph()
    built = op_support.BuiltGraph(graph, {"x": "port x", "y": "port y"}, 0)
    x, y = torch.zeros(4), torch.zeros(4)
    op_support.execute(built, {"x": x, "y": y}, CUDA0)
    ((pack, workspace, handle, stream),) = graph.calls
    assert pack == {"port x": x, "port y": y}
    assert (workspace, handle, stream) == (None, None, 0x5EED0)
    assert cuda_calls == []  # no workspace needed: nothing allocated


def test_the_workspace_is_the_size_settled_at_build(cuda_calls):
    graph = RecordingGraph()
    built = op_support.BuiltGraph(graph, {"x": "port x"}, 4096)
    op_support.execute(built, {"x": torch.zeros(1)}, CUDA0)
    op_support.execute(built, {"x": torch.zeros(1)}, CUDA0)
    assert cuda_calls == [4096, 4096]  # one torch allocation per call, nothing else
    assert [call[1].numel() for call in graph.calls] == [4096, 4096]


def test_a_backend_graph_runs_with_this_threads_handle(cuda_calls, monkeypatch):
    monkeypatch.setattr(op_support, "_thread_handle", lambda index: f"handle of cuda:{index}")
    graph = RecordingGraph()
    built = op_support.BuiltGraph(graph, {"x": "port x"}, 0, backend=True)
    op_support.execute(built, {"x": torch.zeros(1)}, CUDA0)
    assert graph.calls[0][2:] == ("handle of cuda:0", 0x5EED0)


def test_a_call_on_another_device_than_the_current_one_switches_to_it(cuda_calls, monkeypatch):
    entered = []

    class Guard:
        def __init__(self, index):
            entered.append(index)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(torch.cuda, "device", Guard)
    graph = RecordingGraph()
    op_support.execute(op_support.BuiltGraph(graph, {}, 0), {}, torch.device("cuda", 1))
    assert entered == [1] and graph.calls[0][3] == 0x5EED1  # device 1's current stream
    op_support.execute(op_support.BuiltGraph(graph, {}, 0), {}, CUDA0)
    assert entered == [1]  # already current: no switch


def test_a_host_device_runs_with_no_stream():
    graph = RecordingGraph()
    op_support.execute(
        op_support.BuiltGraph(graph, {"x": "port x"}, 0), {"x": torch.zeros(1)}, torch.device("cpu")
    )
    assert graph.calls[0][2:] == (None, None)


@pytest.mark.parametrize("nbytes", [1, 255, 4096])
def test_the_workspace_starts_on_a_256_byte_boundary(nbytes):
    ws = op_support._workspace(nbytes, torch.device("cpu"))
    assert ws.data_ptr() % 256 == 0 and ws.numel() == nbytes


def test_a_build_inside_a_capture_is_refused_naming_the_call_and_the_graph(monkeypatch):
    monkeypatch.setattr(op_support, "capturing", lambda device: True)
    cache, built = op_support.GraphCache(), []
    with pytest.raises(StreamCaptureError) as info:
        cache.get(("sdpa", 1, 128, 64), lambda: built.append(1), call="pygraph_sdpa.sdpa()", device=CUDA0)
    message = str(info.value)
    assert message.startswith("pygraph_sdpa.sdpa(): the first call of graph ('sdpa', 1, 128, 64) builds it")
    assert "run the op once eagerly" in message and "before the capture" in message
    assert isinstance(info.value, RuntimeError) and built == [] and cache.builds == 0


def test_a_graph_built_eagerly_is_served_inside_a_capture(monkeypatch):
    cache = op_support.GraphCache()
    first = cache.get(("gdn", 64), lambda: "built", call="gdn()", device=torch.device("cpu"))
    monkeypatch.setattr(op_support, "capturing", lambda device: True)
    assert cache.get(("gdn", 64), lambda: "again", call="gdn()", device=CUDA0) == first == "built"
    assert cache.builds == 1


def test_capturing_asks_torch_on_cuda_only(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert op_support.capturing(CUDA0) is True
    assert op_support.capturing(torch.device("cpu")) is False  # a CPU-only torch has no capture to ask


def test_a_threads_first_handle_inside_a_capture_is_refused(monkeypatch):
    monkeypatch.setattr(op_support, "capturing", lambda device: True)
    monkeypatch.setattr(op_support, "_handles", type("Local", (), {})())
    with pytest.raises(StreamCaptureError, match="the cuDNN handle of cuda:3 for this thread"):
        op_support._thread_handle(3)


def test_a_threads_handle_is_created_once_per_device(monkeypatch):
    import sys
    import types

    created = []
    fake = types.ModuleType("cudnn")
    fake.create_handle = lambda: created.append(1) or f"handle {len(created)}"
    monkeypatch.setitem(sys.modules, "cudnn", fake)
    monkeypatch.setattr(op_support, "_handles", type("Local", (), {})())
    monkeypatch.setattr(op_support, "capturing", lambda device: False)

    class Guard:
        def __init__(self, index):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(torch.cuda, "device", Guard)
    assert op_support._thread_handle(0) == op_support._thread_handle(0) == "handle 1"
    assert op_support._thread_handle(1) == "handle 2"


# --- prepared calls, their launcher, and the calls that may skip torch's dispatcher -------------------


def test_a_launcher_runs_on_the_current_stream_allocating_only_its_workspace(cuda_calls):
    graph = RecordingGraph()
    built = op_support.BuiltGraph(graph, {"x": "port x", "y": "port y"}, 512)
    launch = op_support.launcher(built, ("x", "y"), CUDA0)
    x, y = torch.zeros(4), torch.zeros(4)
    launch(x, y)
    launch(y, x)
    assert [call[0] for call in graph.calls] == [{"port x": x, "port y": y}, {"port x": y, "port y": x}]
    assert [call[2:] for call in graph.calls] == [(None, 0x5EED0)] * 2
    assert cuda_calls == [512, 512]  # one workspace per call, nothing else


def test_a_launcher_of_a_replaced_execute_hands_it_the_tensors_by_name():
    seen = []
    built = op_support.BuiltGraph(RecordingGraph(), {"x": "port x"}, 0)
    launch = op_support.launcher(built, ("x",), torch.device("cpu"), lambda *call: seen.append(call))
    x = torch.zeros(1)
    launch(x)
    assert seen == [(built, {"x": x}, torch.device("cpu"))]


def test_a_prepared_call_lives_as_long_as_its_graph(monkeypatch):
    cache = op_support.GraphCache()
    monkeypatch.setattr(cache, "capacity", 1)
    first = cache.get(("a",), lambda: op_support.BuiltGraph(RecordingGraph(), {}, 0))
    cache.remember(("call a",), first, "prepared a")
    assert cache.call(("call a",)) == "prepared a" and cache.call(("call b",)) is None
    cache.get(("b",), lambda: op_support.BuiltGraph(RecordingGraph(), {}, 0))  # drops graph a
    assert cache.call(("call a",)) is None
    cache.remember(("call a",), first, "prepared a")  # a dropped graph's call is not kept
    assert cache.call(("call a",)) is None
    assert cache.call((["unhashable"],)) is None


def test_a_prepared_call_is_of_the_engine_settings_its_graph_was_planned_under(monkeypatch):
    cache = op_support.GraphCache()
    built = cache.get(("a",), lambda: op_support.BuiltGraph(RecordingGraph(), {}, 0))
    cache.remember(("call a",), built, "prepared a")
    monkeypatch.setenv("PYGRAPH_ENABLE_OPT_IN_ENGINES", "some_engine")
    assert cache.call(("call a",)) is None
    monkeypatch.delenv("PYGRAPH_ENABLE_OPT_IN_ENGINES")
    assert cache.call(("call a",)) == "prepared a"
    cache.clear()
    assert cache.call(("call a",)) is None


def test_direct_calls_are_plain_tensors_with_nothing_for_the_dispatcher_to_do():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    x = torch.zeros(2)
    assert op_support.direct((x, None))
    assert not op_support.direct((torch.zeros(2, requires_grad=True),))  # autograd records it
    with torch.no_grad():
        assert op_support.direct((torch.zeros(2, requires_grad=True),))
    assert not op_support.direct((torch.nn.Parameter(torch.zeros(2), requires_grad=False),))
    with Mode():
        assert not op_support.direct((x,))
    with torch.profiler.profile():
        assert not op_support.direct((x,))
    assert not torch.func.vmap(lambda t: torch.tensor(op_support.direct((t,))))(torch.zeros(2, 2)).any()
