"""GPU proof of ``Monitor(system_metrics=...)``: train a small torch model on ``cuda:0`` with the
sampler on, then print the GPU tags read back from two backends (TensorBoard and CSV, each
through its plugin's reader) and the job's GPU memory against ``torch.cuda.memory_reserved()``.

    python examples/gpu_system_metrics.py [--log-dir runs-gpu] [--seconds 20]

Needs ``torch`` with CUDA, ``pip install psutil nvidia-ml-py`` and, from a clone,
``pip install ./core ./plugins/tensorboard_monitor ./plugins/csv_monitor``. Without a GPU it
says so and exits 0. The job's memory
(``system/gpu0/memory_job_bytes``, NVML's figure for the training process) is the CUDA
context (a few hundred MB) plus what PyTorch's caching allocator reserved, so it reads higher
than ``memory_reserved()`` by about the context's size.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log-dir", type=Path, default=None)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("no torch installed: nothing to prove on a GPU here")
        return 0
    if not torch.cuda.is_available():
        print("no CUDA GPU visible (torch.cuda.is_available() is False): nothing to prove here")
        return 0

    from core_monitor import Monitor, RunInfo

    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="gpu-proof-"))
    device = torch.device("cuda:0")
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(512, 1024, device=device)
    y = torch.randint(0, 10, (512,), device=device)
    reserved = []
    with Monitor(["tensorboard", "csv"], project="gpu-proof", name="run", log_dir=log_dir,
                 system_metrics=1) as monitor:
        started, step = time.time(), 0
        while time.time() - started < args.seconds:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            if step % 50 == 0:
                monitor.log({"train/loss": loss.item()}, step=step)
                reserved.append(torch.cuda.memory_reserved(device))
            step += 1
        torch.cuda.synchronize()
    run = RunInfo(project="gpu-proof", name="run", log_dir=log_dir)
    import csv_monitor
    import tensorboard_monitor

    print(f"torch.cuda.memory_reserved(cuda:0): {max(reserved) / 2**20:.0f} MiB at most")
    for name, read in (("tensorboard", tensorboard_monitor.read_rows),
                       ("csv", csv_monitor.read_rows)):
        rows = [r for r in read(run) if r[0].startswith("system/gpu")]
        if not rows:
            print(f"{name}: no GPU tags (is nvidia-ml-py installed? pip install "
                  "nvidia-ml-py)")
            continue
        last = max(step for _, step, _ in rows)
        print(f"{name}: {len({s for _, s, _ in rows})} samples; the last one (sample {last}):")
        for tag, step, value in sorted(rows):
            if step == last:
                shown = f"{value / 2**20:.0f} MiB" if tag.endswith("_bytes") else f"{value:g}"
                print(f"  {tag} = {shown}")
        job = [v for t, _, v in rows if t == "system/gpu0/memory_job_bytes"]
        if job:
            print(f"  job's GPU memory at most {max(job) / 2**20:.0f} MiB vs reserved "
                  f"{max(reserved) / 2**20:.0f} MiB (the difference: the CUDA context)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
