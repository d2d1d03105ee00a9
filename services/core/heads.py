"""Which heads a cycle nominates: Kueue's one per ClusterQueue, or up to N (``headsPerClusterQueue``).

Kueue's scheduler takes the head of every ClusterQueue's queue in each cycle; a ClusterQueue with
a deep backlog then admits at most one workload per cycle however much quota is free (Kueue issue
#14477: about ten admissions a minute for one queue 536 deep). kueuelog's Configuration field
``headsPerClusterQueue`` (default 1, Kueue exactly) lets a cycle take up to N heads of a
ClusterQueue, in its queue's order. They are nominated against the state at the start of the
cycle, like every head, and walked in the cycle's order (Kueue's entry ordering: not borrowing
first, then priority, then age), so quota taken by an earlier one is checked for the next: a
later head of the same ClusterQueue that no longer fits is skipped and goes back to the queue,
exactly as a head of another ClusterQueue of the cohort would.

Only BestEffortFIFO ClusterQueues take more than one: a StrictFIFO queue's head blocks those
behind it, so the second would be admitted only if the first were. With fair sharing every
ClusterQueue gives one head (the tournament compares ClusterQueues' shares head by head), and so
does a ClusterQueue with admission fair sharing (its LocalQueues take turns by usage, one head a
cycle; services/core/admissionfair.py).
"""

from __future__ import annotations

from events import objects as o
from services.core.derived import ClusterQueueQueue


def heads_to_take(config: o.Configuration, cq: o.ClusterQueue) -> int:
    """How many heads of ``cq``'s queue the cycle takes."""
    n = config.heads_per_cluster_queue
    if n <= 1 or config.fair_sharing or cq.queueing_strategy != o.QueueingStrategy.BEST_EFFORT_FIFO:
        return 1
    return n


def take_heads(queue: ClusterQueueQueue, n: int) -> list[str]:
    """The first ``n`` workloads of the queue's active list, removed from it, in queue order."""
    taken = [key for _, key in queue.active[:n]]
    del queue.active[:n]
    return taken
