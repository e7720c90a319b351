"""Test-wide settings: no display, no audio, and a small thread count so tests stay predictable."""

import contextlib
import os

import pytest

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
os.environ.setdefault("MPLBACKEND", "Agg")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # One torch thread per pytest-xdist worker (the README's `-n auto`: a worker per core), so
    # the workers' threads never outnumber the cores; subprocesses the tests start likewise.
    os.environ["TORCH_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked ``bf16`` run bf16 kernels: skipped where this CPU has none (an AVX2-only
    x86-64 CPU), the skip reason saying what torch found missing. Tests marked ``gpu`` run on a
    CUDA device: skipped, saying so, where torch sees none."""
    import torch

    from agent.config import bf16_unsupported

    why = bf16_unsupported("cpu")
    skips = {"gpu": None if torch.cuda.is_available() else "gpu: torch sees no CUDA device"}
    skips["bf16"] = None if why is None else f"bf16: {why}"
    for item in items:
        for marker, reason in skips.items():
            if reason is not None and item.get_closest_marker(marker) is not None:
                item.add_marker(pytest.mark.skip(reason=reason))



@pytest.fixture
def no_host_reads():
    """``with no_host_reads("what"):`` any ``.item()``, ``bool()``, ``float()``, ``int()``,
    index, ``tolist()`` or ``numpy()`` of a tensor inside raises (on a GPU each would wait for
    the device)."""
    import torch

    @contextlib.contextmanager
    def forbid(what: str):
        def forbidden(*args, **kwargs):
            raise AssertionError(f"host read of a tensor inside {what}")

        with pytest.MonkeyPatch.context() as mp:
            for name in ("item", "__bool__", "__float__", "__int__", "__index__", "tolist", "numpy"):
                mp.setattr(torch.Tensor, name, forbidden)
            yield

    return forbid


@pytest.fixture
def no_device_syncs():
    """``with no_device_syncs("what"):`` on a GPU, torch's sync debug mode watches the block
    and fails it listing every synchronising call (its place in this repository's code, and how
    often), not only the first. (Off a GPU only warnings raised by hand are seen.)"""
    import traceback
    import warnings

    import torch

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    @contextlib.contextmanager
    def watch(what: str):
        sites: dict[str, int] = {}

        def record(message, category, filename, lineno, file=None, line=None):
            if "called a synchronizing CUDA operation" not in str(message):
                return  # (torch also warns, once, that the debug mode is a prototype)
            ours = [f for f in traceback.extract_stack()[:-1] if f.filename.startswith(root)
                    and "conftest" not in f.filename]  # fmt: skip
            where = " <- ".join(f"{os.path.relpath(f.filename, root)}:{f.lineno}"
                                for f in reversed(ours[-3:]))  # fmt: skip
            sites[where] = sites.get(where, 0) + 1

        gpu = torch.cuda.is_available()
        if gpu:
            torch.cuda.synchronize()
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = record
            if gpu:
                torch.cuda.set_sync_debug_mode("warn")
            try:
                yield sites
            finally:
                if gpu:
                    torch.cuda.set_sync_debug_mode("default")
        listed = "\n".join(f"  {n}x {where}" for where, n in sites.items())
        assert not sites, f"synchronising calls inside {what}:\n{listed}"

    return watch
