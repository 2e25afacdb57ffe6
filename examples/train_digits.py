"""Train a small MLP on scikit-learn's digits (NumPy only) and log it through core-monitor.

    pip install core-monitor trackio-monitor scikit-learn
    python examples/train_digits.py                                   # Trackio, into ./runs
    python examples/train_digits.py --backends trackio,tensorboard,wandb --steps 300
    python examples/train_digits.py --backends mlflow   # MLflow's SQLite store under ./runs/mlflow

The data ships inside scikit-learn (no download). Every step logs ``train/loss``,
``train/accuracy`` and ``lr``; every ``--eval-every`` steps also ``val/loss`` and
``val/accuracy``; every ``--media-every`` steps (and at the last step) the validation confusion
matrix as an image (``val/confusion``) and the first layer's weights as a histogram
(``weights/w1``); always at an explicit ``step``. Same seed, same numbers. wandb runs offline
unless ``WANDB_MODE`` says otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import warnings

import numpy as np
from sklearn.datasets import load_digits

from core_monitor import BackendWarning, Histogram, Image, Monitor


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backends", default="trackio", help="comma-separated (default: trackio)")
    p.add_argument("--log-dir", default="runs", help="where backends write (default: runs)")
    p.add_argument("--project", default="digits")
    p.add_argument("--name", default=None, help="run name (default: date-time-host)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.5, help="peak learning rate")
    p.add_argument("--warmup", type=int, default=20, help="linear warm-up steps, then cosine")
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--media-every", type=int, default=50, help="confusion image, histogram")
    p.add_argument("--record", default=None, help="also write what was logged to this JSON file")
    return p.parse_args(argv)


def learning_rate(step: int, args: argparse.Namespace) -> float:
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = (step - args.warmup) / max(1, args.steps - args.warmup)
    return 0.5 * args.lr * (1 + math.cos(math.pi * progress))


def confusion_image(params: dict, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The confusion matrix (rows: true digit, columns: predicted) as a 80x80 grey image,
    each cell 8x8 pixels, brightness = share of the row's samples (uint8)."""
    h = np.maximum(x @ params["w1"] + params["b1"], 0)
    predicted = (h @ params["w2"] + params["b2"]).argmax(axis=1)
    counts = np.zeros((10, 10))
    np.add.at(counts, (y, predicted), 1)
    shares = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    return np.kron(np.rint(shares * 255), np.ones((8, 8))).astype(np.uint8)


def forward(params: dict, x: np.ndarray, y: np.ndarray) -> tuple[float, float, dict]:
    """Cross-entropy loss, accuracy and gradients of a one-hidden-layer ReLU MLP."""
    h = np.maximum(x @ params["w1"] + params["b1"], 0)
    logits = h @ params["w2"] + params["b2"]
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    n = len(y)
    loss = -np.log(probs[np.arange(n), y] + 1e-12).mean()
    accuracy = (probs.argmax(axis=1) == y).mean()
    d_logits = probs
    d_logits[np.arange(n), y] -= 1
    d_logits /= n
    d_h = (d_logits @ params["w2"].T) * (h > 0)
    grads = {"w2": h.T @ d_logits, "b2": d_logits.sum(0), "w1": x.T @ d_h, "b1": d_h.sum(0)}
    return float(loss), float(accuracy), grads


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    os.environ.setdefault("WANDB_MODE", "offline")  # the user's own WANDB_MODE wins

    rng = np.random.default_rng(args.seed)
    x, y = load_digits(return_X_y=True)
    x = x / 16.0  # pixels are 0..16
    order = rng.permutation(len(x))
    val, train = order[: len(x) // 5], order[len(x) // 5 :]
    params = {
        "w1": rng.normal(0, math.sqrt(2 / 64), (64, args.hidden)), "b1": np.zeros(args.hidden),
        "w2": rng.normal(0, math.sqrt(1 / args.hidden), (args.hidden, 10)), "b2": np.zeros(10),
    }
    config = {k: v for k, v in vars(args).items() if k not in ("backends", "log_dir", "record")}
    config["model"] = {"type": "mlp", "layers": [64, args.hidden, 10]}
    config["data"] = {"train": len(train), "val": len(val)}

    logged, media = [], []
    if "mlflow" in backends:
        # Expected here, so said once up front rather than as the core's BackendWarning
        print("mlflow stores no histograms (MLflow has no such type): weights/w1 goes to the "
              "other backends only")
        warnings.filterwarnings("ignore", r"backend 'mlflow' does not store histogram",
                                BackendWarning)
    # Monitor() returns at once: each backend starts in a writer process of its own, importing
    # its SDK behind the training loop (wandb and mlflow take seconds; what is logged meanwhile
    # waits in the writer's pipe), and close() waits for them to write everything
    print(f"starting {', '.join(backends)} (a writer process each, importing its SDK behind "
          "the training loop)", flush=True)
    with Monitor(backends, project=args.project, name=args.name, config=config,
                 log_dir=args.log_dir) as monitor:
        for step in range(args.steps):
            batch = rng.choice(train, args.batch_size, replace=False)
            loss, accuracy, grads = forward(params, x[batch], y[batch])
            lr = learning_rate(step, args)
            for key, grad in grads.items():
                params[key] -= lr * grad
            metrics = {"train/loss": loss, "train/accuracy": accuracy, "lr": lr}
            if step % args.eval_every == 0 or step == args.steps - 1:
                val_loss, val_accuracy, _ = forward(params, x[val], y[val])
                metrics.update({"val/loss": val_loss, "val/accuracy": val_accuracy})
                print(f"step {step:4d}  loss {loss:.4f}  val/loss {val_loss:.4f}  "
                      f"val/accuracy {val_accuracy:.3f}  lr {lr:.4f}")
            monitor.log(metrics, step=step)
            logged += [(tag, step, value) for tag, value in metrics.items()]
            if step % args.media_every == 0 or step == args.steps - 1:
                pixels = confusion_image(params, x[val], y[val])
                monitor.log({"val/confusion": Image(pixels, caption=f"step {step}"),
                             "weights/w1": Histogram(params["w1"], bins=64)}, step=step)
                counts, _ = np.histogram(params["w1"], bins=64)
                media += [("val/confusion", step, "image",
                           hashlib.sha256(pixels.tobytes()).hexdigest()),
                          ("weights/w1", step, "histogram", counts.tolist())]
        run = monitor.run
        print("closing: each writer writes what it was sent and ends its run...", flush=True)

    root = os.path.abspath(args.log_dir)
    if args.record:
        with open(args.record, "w", encoding="utf-8") as f:
            json.dump({"project": run.project, "name": run.name, "log_dir": root,
                       "backends": backends, "rows": logged, "media": media}, f)
    # The commands that open each backend's run, as runnable: the SDKs' tools sit next to the
    # interpreter running this script (in `nox -s demo`, .nox/demo/bin), maybe not on PATH.
    tools = os.path.dirname(sys.executable)
    where = {
        "trackio": f"{root}/trackio/{run.project}.db\n"
                   f"    TRACKIO_DIR={root}/trackio {tools}/trackio show --project {run.project}",
        "tensorboard": f"{root}/{run.project}/{run.name}/\n"
                       f"    {tools}/tensorboard --logdir {root}/{run.project} --host 127.0.0.1",
        "wandb": f"{root}/wandb/offline-run-*/\n"
                 f"    {tools}/wandb leet {root}/wandb    (a terminal UI; "
                 f"wandb sync {root}/wandb/offline-run-* uploads it)"
                 if os.environ.get("WANDB_MODE") == "offline" else f"{root}/wandb/ (and wandb.ai)",
        "mlflow": f"sqlite:///{root}/mlflow/mlflow.db (unless MLFLOW_TRACKING_URI is set)\n"
                  # mlflow ui sends usage telemetry unless told not to; the demo sends nothing
                  f"    MLFLOW_DISABLE_TELEMETRY=true {tools}/mlflow ui --backend-store-uri sqlite:///{root}/mlflow/mlflow.db"
                  " --host 127.0.0.1",
    }
    print(f"\nrun {run.project}/{run.name}: {args.steps} steps logged to {', '.join(backends)}")
    for name in backends:
        print(f"  {name}: {where.get(name, root)}")


if __name__ == "__main__":
    main()
