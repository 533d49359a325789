"""Training data: public-domain text windows mixed with synthetic long-range tasks, as bytes.

Text: the files given (by default the Debian texts in ../shared/fixtures/text: bible-kjv-text,
dict-devil, jargon-text). The last `held_out` share of every file is kept for evaluation.

Synthetic samples put facts into a window of real text and ask for them at its end, so the
model learns to trust what the induction head copies:
    passkey   " The pass key is 58213. Remember it. 58213 is the pass key." ... "The pass key is 58213."
    magic     " One of the special magic numbers for apple is: 1234567." ... "for apple is: 1234567."
    repeat    a span of the window repeated verbatim later on
"""

import numpy as np

BOS = 256

WORDS = ["apple", "river", "candle", "falcon", "garden", "harbor", "island", "jacket", "kettle",
         "lantern", "meadow", "needle", "orchard", "pepper", "quartz", "rabbit", "saddle", "tunnel",
         "umbrella", "valley", "walnut", "yellow", "zephyr", "anchor", "blanket", "copper", "dolphin",
         "engine", "feather", "glacier", "hammock", "ivory"]


class Corpus:
    def __init__(self, paths, held_out=0.02, seed=0):
        self.train, self.test = [], []
        for path in paths:
            data = np.frombuffer(open(path, "rb").read(), dtype=np.uint8)
            cut = int(len(data) * (1 - held_out))
            self.train.append(data[:cut])
            self.test.append(data[cut:])
        sizes = np.array([len(t) for t in self.train], dtype=np.float64)
        self.weights = sizes / sizes.sum()
        self.rng = np.random.default_rng(seed)

    def _window(self, n, source):
        f = self.rng.choice(len(source), p=self.weights)
        start = self.rng.integers(0, len(source[f]) - n)
        return source[f][start:start + n].astype(np.int64)

    def text(self, n):
        """BOS plus n - 1 bytes of training text."""
        return np.r_[BOS, self._window(n - 1, self.train)]

    def _digits(self, k):
        return "".join(str(d) for d in self.rng.integers(0, 10, k))

    def synthetic(self, n):
        """A window of n tokens (BOS first) with a fact hidden in it and asked for at its end."""
        kind = self.rng.integers(0, 3)
        if kind == 0:
            key = self._digits(int(self.rng.integers(3, 9)))
            fact = f" The pass key is {key}. Remember it. {key} is the pass key."
            ask = f"\nWhat is the pass key? The pass key is {key}."
        elif kind == 1:
            word, value = WORDS[self.rng.integers(len(WORDS))], self._digits(7)
            fact = f" One of the special magic numbers for {word} is: {value}."
            ask = f"\nWhat is the special magic number for {word} mentioned in the provided text? " \
                  f"The special magic number for {word} is: {value}."
        else:
            fact, ask = "", ""
        fact_b, ask_b = np.frombuffer(fact.encode(), np.uint8), np.frombuffer(ask.encode(), np.uint8)
        if n - 1 - len(fact_b) - len(ask_b) < 200:  # too short a window for this task: plain text
            return self.text(n)
        body = self._window(n - 1 - len(fact_b) - len(ask_b), self.train)
        if kind == 2:  # repeat a span: copy body[a:a+m] to a later place
            m = int(self.rng.integers(24, 160))
            a = int(self.rng.integers(0, len(body) // 2 - m))
            b = int(self.rng.integers(a + m, len(body) - m))
            body = body.copy()
            body[b:b + m] = body[a:a + m]
            return np.r_[BOS, body]
        at = int(self.rng.integers(0, len(body)))
        return np.r_[BOS, body[:at], fact_b, body[at:], ask_b].astype(np.int64)

    def batch(self, batch, n, synthetic_share):
        rows = [self.synthetic(n) if self.rng.random() < synthetic_share else self.text(n) for _ in range(batch)]
        return np.stack(rows)

    def held_out_windows(self, n, count):
        """`count` fixed windows of held-out text (BOS plus n - 1 bytes), spread over the files."""
        rng = np.random.default_rng(1234)
        rows = []
        for i in range(count):
            part = self.test[i % len(self.test)]
            start = rng.integers(0, len(part) - n)
            rows.append(np.r_[BOS, part[start:start + n - 1].astype(np.int64)])
        return np.stack(rows)
