"""How close one pass of a simple learner gets to the oracle AUC on generated data.

Draws the samples of `elasticctr.data.generate`'s model in memory (training hours minus
the held-out tenth, then one held-out hour), trains a one-pass AdaGrad logistic
regression on the first-order features (batches of 256, like the default DNN), and
prints its held-out AUC next to the oracle's. It is a quick proxy for what the DNN
reaches (at 5,000 feasigns per slot it gave 0.706 where the quickstart served 0.699-0.706)
and is how the demo vocabulary (`generate.DEMO_VOCAB`) was chosen (docs/local.md):

  .venv/bin/python bench/data/demo_learnability.py --vocab 5000 1000 300 100
"""

from __future__ import annotations

import argparse

import numpy as np

from elasticctr.data.generate import GeneratorSpec, SyntheticModel, auc


def one_pass(spec: GeneratorSpec, lines: int, hours: int, lr: float = 0.05) -> tuple[float, float]:
    model = SyntheticModel(spec)
    rng = np.random.default_rng(1)
    n = hours * lines * 9 // 10
    ranks, present = model.draw(rng, n)
    clicks = rng.random(n) < model.probability(ranks, present)
    test_ranks, test_present = model.draw(rng, lines)
    truth = model.probability(test_ranks, test_present)
    test_clicks = rng.random(lines) < truth
    nslots = len(spec.slots)
    w = np.zeros((nslots, spec.vocab))
    g2 = np.full_like(w, 1e-6)
    b, gb = 0.0, 1e-6
    idx = np.arange(nslots)
    for s in range(0, n, 256):
        r, p, y = ranks[s : s + 256], present[s : s + 256], clicks[s : s + 256]
        g = 1 / (1 + np.exp(-(b + (w[idx, r] * p).sum(1)))) - y
        gw = np.zeros_like(w)
        for j in range(nslots):
            np.add.at(gw[j], r[p[:, j], j], g[p[:, j]])
        g2 += gw**2
        w -= lr * gw / np.sqrt(g2)
        gb += g.sum() ** 2
        b -= lr * g.sum() / np.sqrt(gb)
    score = b + (w[idx, test_ranks] * test_present).sum(1)
    return auc(test_clicks, score), auc(test_clicks, truth)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--vocab", type=int, nargs="+", default=[5000, 1000, 300, 100])
    ap.add_argument("--slots", type=int, default=16)
    ap.add_argument("--lines", type=int, default=40_000, help="lines per hour")
    ap.add_argument("--hours", type=int, default=3, help="training hours")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for vocab in args.vocab:
        spec = GeneratorSpec(slots=list(range(args.slots)), vocab=vocab, seed=args.seed)
        got, oracle = one_pass(spec, args.lines, args.hours)
        print(
            f"vocab {vocab:>6}: one-pass LR {got:.4f}, oracle {oracle:.4f}, gap {oracle - got:.4f}"
        )


if __name__ == "__main__":
    main()
