"""Readings of a group of processes (psutil) and of the GPUs the job sees (NVML).

Tag names (the ``system/`` prefix and a node label are added by ``core_monitor.system.sampler``):

* ``cpu_percent``: CPU time the processes used since the previous sample, in percent of one
  core, summed over the processes (as ``top`` and ``psutil.Process.cpu_percent`` count it:
  two busy cores are 200).
* ``memory_rss_bytes``: resident memory, summed (pages shared between processes count once
  per process, as ``ps`` and psutil count RSS).
* ``threads``, ``processes``: how many.
* ``gpu<i>/utilization_percent``, ``gpu<i>/memory_job_bytes`` (held by the job's processes),
  ``gpu<i>/memory_used_bytes`` (held by every process on the device), ``gpu<i>/memory_total_bytes``,
  ``gpu<i>/power_watts``, ``gpu<i>/temperature_celsius``: for each GPU the sampling process
  sees, ``<i>`` its CUDA index there (``cuda:<i>``, after ``CUDA_VISIBLE_DEVICES``). A
  reading the device does not support is left out; without NVML (no ``nvidia-ml-py``, no
  driver, no GPU) there is no GPU tag at all, and no error.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from typing import Any


class ProcessMeter:
    """CPU, memory and threads of a changing group of processes, between two samples.

    A process's CPU time is the difference of its ``user + system`` time between two samples;
    a process born after the previous sample counts all of its CPU time; one first seen
    although older (a rank that registered late) counts from its next sample on; one that
    ended between two samples is missed for that interval.
    """

    def __init__(self) -> None:
        self._last: dict[tuple[int, float], float] = {}
        self._last_wall: float | None = None

    def read(self, processes: Iterable[Any], now: float) -> dict[str, float]:
        """The readings at wall time ``now`` (``time.time()``) for ``processes``
        (``psutil.Process``). ``cpu_percent`` is absent at the first read."""
        import psutil

        cpu = memory = threads = count = 0.0
        seen: dict[tuple[int, float], float] = {}
        for process in processes:
            try:
                with process.oneshot():
                    times = process.cpu_times()
                    key = (process.pid, process.create_time())
                    memory += process.memory_info().rss
                    threads += process.num_threads()
            except psutil.Error:
                continue  # ended meanwhile
            count += 1
            used = times.user + times.system
            seen[key] = used
            before = self._last.get(key)
            if before is not None:
                cpu += used - before
            elif self._last_wall is not None and key[1] >= self._last_wall:
                cpu += used
        out = {"memory_rss_bytes": memory, "threads": threads, "processes": count}
        if self._last_wall is not None and now > self._last_wall:
            out["cpu_percent"] = 100.0 * cpu / (now - self._last_wall)
        self._last, self._last_wall = seen, now
        return out


def visible_gpus(nvml: Any, environ: dict[str, str] | None = None) -> list[Any]:
    """NVML handles of the GPUs this process sees, in CUDA's order: every device, or those
    ``CUDA_VISIBLE_DEVICES`` names (indices or ``GPU-...`` UUIDs; an entry NVML cannot find
    ends the list, as CUDA ignores the entries after an invalid one)."""
    env = os.environ if environ is None else environ
    count = nvml.nvmlDeviceGetCount()
    wanted = env.get("CUDA_VISIBLE_DEVICES")
    if wanted is None:
        return [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    handles = []
    for entry in (e.strip() for e in wanted.split(",") if e.strip()):
        try:
            if entry.isdigit():
                handles.append(nvml.nvmlDeviceGetHandleByIndex(int(entry)))
            else:
                handles.append(nvml.nvmlDeviceGetHandleByUUID(entry))
        except nvml.NVMLError:
            break
    return handles


class GpuMeter:
    """NVML readings of the GPUs the job sees; inert (no tags) without NVML or a GPU."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._handles: list[Any] = []
        try:
            import pynvml  # the nvidia-ml-py distribution

            pynvml.nvmlInit()
        except Exception:  # no library, no driver (NVMLError_LibraryNotFound), no GPU
            return
        try:
            self._handles = visible_gpus(pynvml)
        except pynvml.NVMLError:
            self._handles = []
        self._nvml = pynvml

    @property
    def available(self) -> bool:
        """Whether there is at least one GPU to read."""
        return bool(self._handles)

    def read(self, job_pids: set[int]) -> dict[str, float]:
        """The readings of every visible GPU; ``job_pids``: the job's processes, whose GPU
        memory ``memory_job_bytes`` sums."""
        nvml, out = self._nvml, {}
        for index, handle in enumerate(self._handles):
            tag = f"gpu{index}/"
            with contextlib.suppress(nvml.NVMLError):
                out[tag + "utilization_percent"] = float(
                    nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            with contextlib.suppress(nvml.NVMLError):
                info = nvml.nvmlDeviceGetMemoryInfo(handle)
                out[tag + "memory_used_bytes"] = float(info.used)
                out[tag + "memory_total_bytes"] = float(info.total)
            with contextlib.suppress(nvml.NVMLError):
                job = self._job_memory(handle, job_pids)
                if job is not None:
                    out[tag + "memory_job_bytes"] = job
            with contextlib.suppress(nvml.NVMLError):
                out[tag + "power_watts"] = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
            with contextlib.suppress(nvml.NVMLError):
                out[tag + "temperature_celsius"] = float(
                    nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
        return out

    def _job_memory(self, handle: Any, job_pids: set[int]) -> float | None:
        nvml, total, known = self._nvml, 0.0, False
        processes = list(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        with contextlib.suppress(nvml.NVMLError):
            processes += nvml.nvmlDeviceGetGraphicsRunningProcesses(handle)
        for process in processes:
            used = getattr(process, "usedGpuMemory", None)
            if process.pid in job_pids and used is not None:
                total += float(used)
                known = True
        # No process of the job on the device: 0; NVML hiding the figures (a container
        # without the host's pid namespace): no tag rather than a wrong 0.
        if not known and any(getattr(p, "usedGpuMemory", None) is None for p in processes):
            return None
        return total

    def close(self) -> None:
        """Release NVML."""
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None
            self._handles = []
