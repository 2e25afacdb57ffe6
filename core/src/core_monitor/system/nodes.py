"""Samples of the other nodes into rank 0's run, through the job's rendezvous store.

With ``rank_zero_only=True`` (the default) only rank 0 writes, but every node has a sampler
(its local rank 0). A node that does not write hands each sample (already labelled
``system/node<k>/...``) to the key-value store the launcher serves for the job
(``torch.distributed.TCPStore`` at ``MASTER_ADDR:MASTER_PORT``: torchrun's agent store, which
every rank reaches by the env:// rendezvous), under ``core-monitor/<job>/<node>/<n>``; rank 0
polls the store every interval, logs each node's samples with their own sample numbers and wall
times, and deletes the keys it took. Only public ``TCPStore`` calls (``set``, ``check``,
``get``, ``delete_key``). Without torch or without ``MASTER_ADDR``/``MASTER_PORT`` the other
nodes' samples are not forwarded (a ``RuntimeWarning`` says so once); samples a node sends
after rank 0 closed its monitor are not stored.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import threading
import warnings
from collections.abc import Callable
from datetime import timedelta
from typing import Any

#: Seconds a store client waits to connect, and for one request.
STORE_TIMEOUT = 30.0


def connect() -> Any | None:
    """A client of the job's rendezvous store, or ``None`` (with one warning) without one."""
    host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT", "")
    try:
        dist = importlib.import_module("torch.distributed")
        if not host or not port.isdigit():
            raise RuntimeError("MASTER_ADDR/MASTER_PORT are not set")
        return dist.TCPStore(host, int(port), is_master=False,
                             timeout=timedelta(seconds=STORE_TIMEOUT))
    except Exception as error:
        warnings.warn(f"system_metrics: the samples of the other nodes cannot reach rank 0's "
                      f"run without the job's torch.distributed store ({error!r}); each node's "
                      "samples stay out of it", RuntimeWarning, stacklevel=3)
        return None


def _key(job: str | None, node: int, n: int) -> str:
    return f"core-monitor/{job}/{node}/{n}"


def forwarder(store: Any, job: str | None, node: int
              ) -> Callable[[dict[str, float], int, float], None]:
    """The sampler's ``log`` on a node that does not write: each sample into the store."""

    def forward(values: dict[str, float], step: int, wall_time: float) -> None:
        store.set(_key(job, node, step), json.dumps({"values": values, "wall_time": wall_time}))

    return forward


class Collector:
    """On rank 0: take the other nodes' samples from the store every ``interval`` seconds and
    log each with ``log(values, step, wall_time)``.

    Args:
        store: a client of the job's store (``connect``).
        job: the job key (``core_monitor.system.job.job_key``), the same on every node.
        nodes: the other nodes' ranks.
    """

    def __init__(self, store: Any, job: str | None, nodes: list[int], interval: float,
                 log: Callable[[dict[str, float], int, float], Any]) -> None:
        self._store, self._job, self._log, self._interval = store, job, log, interval
        self._next = dict.fromkeys(nodes, 0)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="core-monitor-nodes",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            if not self.collect():
                return

    def collect(self) -> bool:
        """Log every sample waiting in the store; ``False`` once the monitor refuses one."""
        with self._lock:
            for node, n in self._next.items():
                try:
                    while self._store.check([_key(self._job, node, n)]):
                        key = _key(self._job, node, n)
                        sample = json.loads(self._store.get(key))
                        self._store.delete_key(key)
                        self._log(sample["values"], n, float(sample["wall_time"]))
                        n += 1
                except RuntimeError:  # the monitor closed, or the store is gone
                    return False
                finally:
                    self._next[node] = n
            return True

    def stop(self) -> None:
        """Take what is waiting once more, then stop. Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(STORE_TIMEOUT)
        with contextlib.suppress(Exception):
            self.collect()
