"""The minibatches RLlib's ``MiniBatchCyclicIterator`` cuts from a train batch, as a plan
of row ranges the lean PPO learner slices from the batch's tensors."""

from __future__ import annotations

# One minibatch of the plan: row ranges [start, end) to concatenate, in order, and
# SHUFFLE where RLlib reshuffles the batch between two of them.
SHUFFLE = None
Piece = tuple[int, int] | None


def minibatch_plan(
    n: int, minibatch_size: int, num_epochs: int, shuffle: bool
) -> list[list[Piece]]:
    """What RLlib's ``MiniBatchCyclicIterator`` does to a batch of ``n`` rows, as a plan:
    for each minibatch, the row ranges it concatenates, with ``SHUFFLE`` where the batch
    is reshuffled (``np.random.permutation(n)``, as RLlib draws it) before the next range.

    RLlib cycles: a minibatch that runs past the end of the batch takes the tail, counts
    an epoch, shuffles the batch when asked, and continues from the top of the shuffled
    batch; it stops once every row was covered ``num_epochs`` times. Each range refers to
    the batch's order at that point of the plan."""
    if n <= 0 or minibatch_size <= 0:
        return []
    plan: list[list[Piece]] = []
    start, epochs = 0, 0
    while epochs < num_epochs:
        steps = minibatch_size
        pieces: list[Piece] = []
        while start + steps >= n:
            pieces.append((start, n))
            steps -= n - start
            start = 0
            epochs += 1
            if shuffle:
                pieces.append(SHUFFLE)
        end = start + steps
        if end > start:
            pieces.append((start, end))
        start = end
        plan.append(pieces)
    return plan
