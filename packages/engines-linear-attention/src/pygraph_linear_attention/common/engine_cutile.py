"""What the cuTile engines share, gdn's and kda's (`gdn.engine_cutile`, `kda.engine_cutile`): the plan
that binds an op's kernels to one graph (`CutilePlan`), and the probes for cuTile and its compiler.

A plan settles at build the operand positions, the declared geometry each call must keep, the
workspace carve and the kernels' constant arguments (the op's config); a call reads the pointers,
wraps them as device arrays (reused while the pointers repeat) and enqueues the kernels on the
call's stream through the op's launch sequence. cuTile compiles a kernel on its first launch for the
arguments' types and keeps it (per process, and in its disk cache), so only the first call of a
configuration pays it.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from pygraph.engines.base import CompiledPlan, ExecutionContext
from pygraph.execution.errors import OperandGeometryError
from pygraph_linear_attention.common.support import DTYPE_NAMES, row_major

__all__ = ["CUTILE_INSTALL", "CutilePlan", "cutile_installed", "cutile_launch"]

CUTILE_INSTALL = "pip install 'pygraph-engines-linear-attention[cutile]'"


class CutilePlan(CompiledPlan):
    """An op's cuTile kernels bound to one graph (forward or backward): positions, geometry and
    workspace settled at build; ``engine`` names it in its refusals, ``run`` is the op's launch
    sequence (``launch_forward`` or ``launch_backward`` of its host) over ``kernels``.

    A call whose operands keep the declared geometry launches; any other is refused by `_refuse`,
    naming the operand and the rule, before anything is enqueued (the kernels' constants were
    compiled for the declared shapes).
    """

    reads_stream = True
    checks_geometry = True  # every operand held to its declared shape and stride in `execute`

    def __init__(
        self,
        name: str,
        cfg: Any,
        positions: dict[str, int],
        declared: dict[str, Any],
        launch: Any,
        kernels: Any,
        run: Any,
        engine: str,
    ) -> None:
        from pygraph_linear_attention.common.device_arrays import DeviceArray

        self._name, self._cfg, self._launch_kernel, self._engine = name, cfg, launch, engine
        self._array = DeviceArray
        # (role, pack position, declared shape, declared stride, dtype name)
        self._rows = tuple(
            (
                role,
                pos,
                tuple(declared[role].shape),
                tuple(declared[role].stride),
                DTYPE_NAMES[declared[role].dtype],
            )
            for role, pos in positions.items()
        )
        self._regions = cfg.workspace_regions()
        self._spare_offset = next(r.offset for r in self._regions if r.name == "spare")
        self._workspace_bytes = cfg.workspace_bytes
        self._cache: dict[tuple, Any] = {}  # (role, pointer, device) -> DeviceArray
        self._kernels, self._run = kernels, run  # launch_forward or launch_backward

    def get_workspace_size(self) -> int:
        return self._workspace_bytes

    def _view(self, key: tuple, pointer: int, shape: tuple, stride: tuple, dtype: str, device: int) -> Any:
        found = self._cache.get(key)
        if found is None:
            if len(self._cache) > 256:  # a caller cycling through many buffers: keep the table small
                self._cache.clear()
            found = self._cache[key] = self._array(pointer, shape, stride, dtype, device)
        return found

    def execute(self, graph: Any, pack: Any, ctx: ExecutionContext) -> None:
        bufs = pack.buffers
        device = pack.device if pack.device >= 0 else 0  # a bare address: the current device's
        arrays = {}
        for role, pos, shape, stride, dtype in self._rows:
            buf = bufs[pos]
            if buf.shape != shape or buf.stride != stride:
                self._refuse(
                    f"operand {role} is shape {list(buf.shape)} stride {list(buf.stride)}; the plan is "
                    f"compiled for the declared shape {list(shape)} stride {list(stride)}"
                )
            arrays[role] = self._view((role, buf.pointer, device), buf.pointer, shape, stride, dtype, device)
        workspace = ctx.workspace or 0
        if not workspace:
            self._refuse(f"needs a workspace of {self._workspace_bytes} bytes, got none")
        if workspace % 256:
            self._refuse(f"workspace pointer {workspace:#x} is not 256-byte aligned")
        for region in self._regions:
            strides = row_major(region.shape)
            arrays[region.name] = self._view(
                (region.name, workspace, device), workspace + region.offset, region.shape, strides,
                region.dtype, device,
            )  # fmt: skip
        spare = self._spare_offset  # the stand-ins of absent operands (rank 2 and 4), never read
        for rank in (2, 4):
            arrays[f"spare{rank}"] = self._view(
                (f"spare{rank}", workspace, device),
                workspace + spare,
                (1,) * rank,
                (1,) * rank,
                "float32",
                device,
            )
        stream = ctx.stream or 0
        launch = self._launch_kernel
        self._run(
            lambda grid, kernel, args: launch(stream, grid, kernel, args), self._kernels, self._cfg, arrays
        )

    def _refuse(self, rule: str) -> None:
        """Raise naming the rule the call breaks (nothing is enqueued)."""
        raise OperandGeometryError(f"{self._engine} (graph {self._name!r}): {rule}", tensor=None)


def cutile_installed() -> bool:
    """Whether cuda.tile can be imported, probed without importing it (``cuda`` is a namespace)."""
    return importlib.util.find_spec("cuda") is not None and importlib.util.find_spec("cuda.tile") is not None


def cutile_launch() -> Any:
    """``cuda.tile.launch``, after checking that cuTile's compiler can be found (a decline if not)."""
    try:
        import cuda.tile as ct
    except ImportError as exc:
        raise ImportError(f"gdn_cutile: needs cuTile ({CUTILE_INSTALL}): {exc}") from exc
    try:
        from cuda.tile._compile import _find_compiler_bin  # the lookup cuTile's JIT runs on first launch
    except ImportError:  # another cuTile release: its first launch reports a missing compiler itself
        return ct.launch
    try:
        _find_compiler_bin()
    except FileNotFoundError as exc:
        raise ImportError(f"gdn_cutile: cuTile's compiler is not available: {exc}") from exc
    return ct.launch
