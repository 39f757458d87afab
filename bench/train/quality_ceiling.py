"""The best held-out AUC any learner can reach from N samples of `ectl data generate` data.

The oracle AUC (`generator.json`) scores the *true* click probabilities: a learner that
sees N samples cannot know the true weight of a feasign it saw 5 times. This script
regenerates the exact samples of a generated folder (same generator, same RNG streams),
then fits, offline and to convergence (many passes, L-BFGS), the first-order weights of
every (slot, feasign) by MAP with the generator's own Gaussian prior (the Bayes estimate
up to the MAP/posterior-mean difference), with the TRUE pairwise-interaction logit given
as a fixed offset. That is an upper bound on what one pass of any model over the same
training hours can reach; it prints it next to the oracle AUC.

  .venv/bin/python bench/train/quality_ceiling.py /tmp/quality/data   # data of quality.py

Training hours = every generated hour but the last (the held-out hour), as quality.py
with `--hours H` on data generated with H+1 hours. Takes ~2 min per 500k training
samples (2M: ~8 min on a shared 2-core machine) and ~3 GB of memory for 2M.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time
from pathlib import Path

import numpy as np


def main() -> None:
    import scipy.sparse as sp
    from scipy.optimize import minimize

    from elasticctr.data import generate as G

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("data", type=Path, help="folder written by `ectl data generate`")
    ap.add_argument("--max-iter", type=int, default=500)
    args = ap.parse_args()

    gen = json.loads((args.data / "generator.json").read_text())
    spec = G.spec_from_json(gen["spec"])
    model = G.model_for(spec)
    start = dt.datetime.strptime(gen["start"], "%Y%m%d/%H")
    nslots, vocab = len(spec.slots), spec.vocab

    def hour(h: int):
        """The samples of hour h exactly as generate() drew them (ranks, presence, clicks)."""
        ranks, present, clicks = [], [], []
        lines = G.split_lines(gen["lines_per_hour"], gen["files_per_partition"])
        for i, n in enumerate(lines):
            rng = G._file_rng(spec.seed, start + dt.timedelta(hours=h), i)
            done = 0
            while done < n:
                k = min(G.BLOCK_LINES, n - done)
                r, p = model.draw(rng, k)
                y = rng.random(k) < model.probability(r, p)
                ranks.append(r)
                present.append(p)
                clicks.append(y)
                done += k
        return np.concatenate(ranks), np.concatenate(present), np.concatenate(clicks)

    def onehot(r, p):
        rows = np.repeat(np.arange(r.shape[0]), nslots).reshape(r.shape)
        cols = r + np.arange(nslots) * vocab
        data = np.ones(int(p.sum()))
        return sp.csr_matrix((data, (rows[p], cols[p])), shape=(r.shape[0], nslots * vocab))

    def interactions(r, p):
        out = np.zeros(r.shape[0])
        for (a, b), (u, v) in zip(model.pairs, model.factors, strict=True):
            dot = np.einsum("ij,ij->i", u[r[:, a]], v[r[:, b]])
            out += np.where(p[:, a] & p[:, b], dot, 0.0)
        return out

    hours = gen["hours"]
    train = [hour(h) for h in range(hours - 1)]
    r_te, p_te, y_te = hour(hours - 1)
    r_tr = np.concatenate([t[0] for t in train])
    p_tr = np.concatenate([t[1] for t in train])
    y_tr = np.concatenate([t[2] for t in train]).astype(np.float64)
    x_tr, x_te = onehot(r_tr, p_tr), onehot(r_te, p_te)
    off_tr, off_te = interactions(r_tr, p_tr), interactions(r_te, p_te)
    lam = 1.0 / float(model.weights.var())  # the generator's prior on first-order weights

    def objective(theta):
        w, b = theta[:-1], theta[-1]
        z = x_tr @ w + b + off_tr
        gz = 1.0 / (1.0 + np.exp(-z)) - y_tr
        loss = np.sum(np.logaddexp(0.0, z) - y_tr * z) + 0.5 * lam * w @ w
        return loss, np.append(x_tr.T @ gz + lam * w, gz.sum())

    t0 = time.monotonic()
    res = minimize(
        objective,
        np.zeros(nslots * vocab + 1),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": args.max_iter},
    )
    w, b = res.x[:-1], res.x[-1]
    first = x_te @ w + b
    true_first = model.bias + sum(
        np.where(p_te[:, j], model.weights[j][r_te[:, j]], 0.0) for j in range(nslots)
    )
    oracle = G.auc(y_te, model.probability(r_te, p_te))
    ceiling = G.auc(y_te, first + off_te)
    print(f"{len(y_tr)} training samples ({hours - 1} hours), held-out hour {len(y_te)} samples")
    print(f"oracle AUC (true probabilities):                     {oracle:.4f}")
    print(f"true first-order weights only (no interactions):     {G.auc(y_te, true_first):.4f}")
    print(f"MAP first-order fit, no interactions:                {G.auc(y_te, first):.4f}")
    print(
        f"ceiling: MAP first-order fit + true interactions:    {ceiling:.4f}  "
        f"(gap to oracle {oracle - ceiling:.4f}; {res.nit} L-BFGS iterations, "
        f"{time.monotonic() - t0:.0f}s)"
    )


if __name__ == "__main__":
    main()
