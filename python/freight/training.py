"""freight.train, evaluate, save and bench: the command's verbs with keyword arguments, returning
Python objects (explain and plan come straight from the engine: freight.explain, freight.plan)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from . import _freight
from .progress import Progress


class TrainResult:
    """What freight.train returns: per-epoch metrics (dicts, the keys of `freight train
    --metrics`), the trained model (a freight.nn.Module with its .spec), and how the run ended."""

    def __init__(self, raw):
        self.epochs = raw["epochs"]
        self.model = raw["model"]
        self.spec = raw["spec"]
        self.device = raw["device"]
        self.wall_seconds = raw["wall_seconds"]
        self.checkpoint = raw["checkpoint"]
        self.interrupted = raw["interrupted"]
        self.stopped_epoch = raw["stopped_epoch"]
        self.stopped_batch = raw["stopped_batch"]

    @property
    def test_accuracy(self):
        return self.epochs[-1]["test_accuracy"] if self.epochs else None

    def __repr__(self):
        last = self.epochs[-1] if self.epochs else None
        end = ("stopped in epoch %d after batch %d" % (self.stopped_epoch, self.stopped_batch)
               if self.interrupted else "%d epochs" % len(self.epochs))
        acc = ", test accuracy %.2f%%" % (100 * last["test_accuracy"]) if last else ""
        return "TrainResult(%s on %s: %s%s, %.1f s)" % (self.spec.name, self.device, end, acc,
                                                         self.wall_seconds)


def _model_option(options, keep):
    """A model given as a dict is written to a temporary model file (train reads files)."""
    model = options.get("model")
    if isinstance(model, dict):
        f = tempfile.NamedTemporaryFile("w", suffix=".json", prefix="freight-model-",
                                        delete=False)
        json.dump(model, f)
        f.close()
        keep.append(f.name)
        options["model"] = f.name
    elif isinstance(model, _freight.nn.Module):
        raise TypeError("freight.train(model=...) takes a zoo name, a model file or a dict and "
                        "builds the network itself; to train a module you built, write the loop "
                        "with freight.optim (docs/python.md)")
    elif isinstance(model, (str, os.PathLike)):
        options["model"] = os.fspath(model)
    elif model is not None:
        raise TypeError(f"freight.train(): option model={model!r} ({type(model).__name__}) must "
                        "be a zoo model name or a model file (str or path), or a model "
                        "description (dict)")


def train(*, progress=True, on_epoch=None, on_batch=None, stream=None, **options):
    """Trains a model as `freight train` does; the options are its flags as keywords
    (model, data, epochs, batch_size, lr, optimizer, schedule, device, save, resume, metrics,
    limit_train, ...). progress: a bar on a terminal, lines elsewhere (False: silent).
    on_epoch / on_batch: your callbacks, given each epoch's report / batch's progress as a dict.
    Ctrl-C stops after the step under way, saves a checkpoint that resumes there (with save=),
    and returns a result with .interrupted set."""
    temporaries = []
    try:
        _model_option(options, temporaries)
        bar = Progress(stream) if progress else None

        def batch_cb(p):
            if bar:
                bar.batch(p)
            if on_batch:
                on_batch(p)

        def epoch_cb(r):
            if bar:
                bar.epoch(r)
            if on_epoch:
                on_epoch(r)

        def note_cb(text):
            if bar:
                bar.note(text)

        raw = _freight._train(options, batch_cb, epoch_cb, note_cb)
    finally:
        for path in temporaries:
            os.unlink(path)
    result = TrainResult(raw)
    if raw["keyboard_interrupt"] and progress:
        out = stream if stream is not None else sys.stdout
        where = ("a checkpoint in %s resumes it: freight.train(resume=%r)" % (
            result.checkpoint, result.checkpoint)) if result.checkpoint else "nothing was saved"
        out.write("stopped by Ctrl-C in epoch %d after batch %d; %s\n" % (
            result.stopped_epoch, result.stopped_batch, where))
    return result


def _count(name, value, allow_none=False):
    """A count argument (an int >= 1; None where allow_none), or a ValueError / TypeError."""
    if value is None and allow_none:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int >= 1, not {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def evaluate(model, data="", split="test", device="auto", batch_size=1000, limit=None):
    """Loss and accuracy of a checkpoint (a path) or a model (from freight.nn.build, freight.load
    or a TrainResult) on a dataset split ("test" or "train"): a dict. limit: the first N samples
    only (None: all). A model is evaluated where its parameters are, after moving it to `device`
    when one is named."""
    if split not in ("test", "train"):
        raise ValueError(f"split must be 'test' or 'train', got {split!r}")
    batch_size = _count("batch_size", batch_size)
    limit = _count("limit", limit, allow_none=True)
    if isinstance(model, (str, os.PathLike)):
        return _freight._evaluate_checkpoint(os.fspath(model), data, split, device, batch_size,
                                             limit)
    spec = getattr(model, "spec", None)
    if spec is None:
        raise TypeError("freight.evaluate needs a checkpoint path or a model with a .spec "
                        "(from freight.nn.build, freight.load or freight.train)")
    if device != "auto":
        model.to(device)  # (in place, as torch's module.to)
    return _freight._evaluate_model(model, spec, data, split, batch_size, limit)


def save(model, path):
    """Saves a model with its spec as a checkpoint that `freight eval`, freight.load and
    PyTorch's load_state_dict read (atomically; non-finite weights are refused)."""
    spec = getattr(model, "spec", None)
    if spec is None:
        raise TypeError("this module has no .spec (it was built from layers in Python): "
                        "freight.save_safetensors(model.state_dict(), path) writes its weights")
    _freight._save_model(model, spec, os.fspath(path))


def _freight_command():
    """The `freight` program: $FREIGHT_EXECUTABLE, the build tree this package was built in,
    or the PATH."""
    if os.environ.get("FREIGHT_EXECUTABLE"):
        return os.environ["FREIGHT_EXECUTABLE"]
    here = os.path.dirname(os.path.abspath(__file__))
    built = os.path.join(os.path.dirname(os.path.dirname(here)), "freight")
    if os.path.isfile(built) and os.access(built, os.X_OK):
        return built
    found = shutil.which("freight")
    if not found:
        raise FileNotFoundError("freight.bench runs the `freight` program: set FREIGHT_EXECUTABLE "
                                "or put it on the PATH")
    return found


def bench(**options):
    """Runs `freight bench` with the options as flags (models, batch_sizes, devices, threads,
    vs="pytorch", python, ...; lists become comma-separated) and returns its JSON report: a
    dict with the rows (step times, samples/s, memory, PyTorch's figures beside)."""
    out = tempfile.mkdtemp(prefix="freight-bench-")
    try:
        args = [_freight_command(), "bench", "--out", out, "--name", "python", "--no-plots"]
        for key, value in options.items():
            flag = "--" + key.replace("_", "-")
            if value is True:
                args.append(flag)
            elif value is False or value is None:
                continue
            elif isinstance(value, (list, tuple)):
                args += [flag, ",".join(str(v) for v in value)]
            else:
                args += [flag, str(value)]
        run = subprocess.run(args, capture_output=True, text=True)
        if run.returncode != 0:
            raise _freight.Error("freight bench failed (exit %d): %s" % (
                run.returncode, (run.stderr or run.stdout).strip()))
        with open(os.path.join(out, "python.json")) as f:
            return json.load(f)
    finally:
        shutil.rmtree(out, ignore_errors=True)
