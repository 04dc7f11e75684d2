"""The progress of freight.train: a bar redrawn in place on a terminal, plain lines elsewhere
(a notebook, a pipe, a log file), and one summary line per epoch either way."""
import sys
import time


def _duration(seconds):
    seconds = int(max(0, seconds))
    return "%d:%02d" % (seconds // 60, seconds % 60) if seconds < 3600 else \
        "%d:%02d:%02d" % (seconds // 3600, seconds // 60 % 60, seconds % 60)


class Progress:
    """Callbacks for freight._train: batch(progress), epoch(report), note(text)."""

    def __init__(self, stream=None, width=24, redraw_seconds=0.1, line_fraction=0.25,
                 perplexity=False):
        self.stream = stream if stream is not None else sys.stdout
        isatty = getattr(self.stream, "isatty", None)
        # A Jupyter kernel's stdout is not a terminal: it gets lines, as a pipe does.
        self.tty = bool(isatty and isatty())
        self.width = width
        self.redraw_seconds = redraw_seconds
        self.line_fraction = line_fraction
        self.perplexity = perplexity
        self._last_draw = 0.0
        self._next_line = line_fraction
        self._drawn = False

    def _write(self, text):
        self.stream.write(text)
        self.stream.flush()

    def note(self, text):
        self._end_bar()
        self._write(text + "\n")

    def batch(self, p):
        done = p["batch"] / max(1, p["batches"])
        rate = p["samples"] / p["seconds"] if p["seconds"] > 0 else 0.0
        eta = p["seconds"] * (1 - done) / done if done > 0 else 0.0
        text = "epoch %d/%d {} %d/%d loss %.4f acc %5.1f%% %.0f samples/s" % (
            p["epoch"], p["epochs"], p["batch"], p["batches"], p["loss"], 100 * p["accuracy"],
            rate)
        if self.tty:
            now = time.monotonic()
            if now - self._last_draw < self.redraw_seconds and p["batch"] < p["batches"]:
                return
            self._last_draw = now
            filled = int(round(done * self.width))
            bar = "|" + "#" * filled + "." * (self.width - filled) + "|"
            self._write("\r" + text.format(bar) + " eta " + _duration(eta) + "\033[K")
            self._drawn = True
        elif done >= self._next_line or p["batch"] == p["batches"]:
            while self._next_line <= done:
                self._next_line += self.line_fraction
            self._write(text.format("%3.0f%%" % (100 * done)) + "\n")

    def _end_bar(self):
        if self._drawn:
            self._write("\n")
            self._drawn = False

    def epoch(self, r):
        self._end_bar()
        self._next_line = self.line_fraction
        if "test_perplexity" in r:
            test = "test loss %.4f perplexity %.2f" % (r["test_loss"], r["test_perplexity"])
        else:
            test = "test loss %.4f acc %.2f%%" % (r["test_loss"], 100 * r["test_accuracy"])
        self._write("epoch %d: train loss %.4f acc %.2f%% | %s | %.1f s, %.0f samples/s\n" % (
            r["epoch"], r["train_loss"], 100 * r["train_accuracy"], test, r["train_seconds"],
            r["samples_per_second"]))
