"""A placement run: every operator of a model runs on the device a placement plan puts it on, one
process per device, and a batch is pipelined through them in micro-batches.

**The plan.** The scenario's ``training.placement`` names every operator's device (the Placement page
fills it with its plan); when it is empty, :func:`resolve` makes the plan with the scenario's strategy,
its pins and the datasheet cost model (:mod:`lab.modelled.placement`). One process per device the plan
uses, ranked in the order of each device's first operator.

**Pieces.** The model is traced with torch.fx (the same trace as the operator graph) and cut by
``torch.fx.passes.split_module`` into pieces: maximal runs of consecutive nodes, in the graph's
topological order, on one device. A plan that goes A -> B -> A becomes three pieces A, B, A. Pieces
numbered in topological order cannot form a cycle between processes, which is what keeps a run free
of deadlock: every process runs its own pieces in that order, sends never block (``isend``), and a
receive only ever waits for a piece with a smaller number (forward) or a larger one (backward). Nodes
the operator graph does not count (shape arithmetic, a reshape of the model input) go with the node
that uses them. Every process has the data: the loader puts each batch wherever its first operators
run, and the labels where the loss is.

**One step (GPipe).** The batch is cut into ``micro_batches`` parts. Forward: each process runs its
pieces in order, each for every micro-batch, sending each output that a piece on another device reads
as soon as it exists. The piece that makes the model's output adds the loss (cross-entropy summed over
the micro-batch, divided by the whole batch, so the micro-batches add up to the batch's mean loss).
Backward: each process runs its pieces in reverse order, each for every micro-batch, and sends the
gradient of every input that came from another device back to it. Then each process's optimiser
steps its own pieces' parameters. A one-process run with the same micro-batches computes the same
numbers (BatchNorm, as in GPipe, sees one micro-batch at a time).

**Emulated devices and links.** With ``training.emulate`` an operator on a device that the topology
says is ``s`` times slower than its fastest device for the operator's class waits ``(s - 1)`` times
its warm time on this machine, measured once per piece and micro-batch size, the training sizes before
the first step (:mod:`.warm_times`: right after a wait an operator runs on a cold core, and a wait of
``s - 1`` times that would multiply this machine's cold start by the device's slow-down); a backward
pass waits by the same rule, with its piece's operators weighted by their warm forward times. A tensor
between two devices arrives no sooner than the topology's link time for its bytes after it was sent
(the receiver waits the rest). Both are recorded as emulated.

**One clock.** Every process stamps with ``time.perf_counter``, which on Linux reads the machine-wide
monotonic clock; the offset of each process from rank 0 is still estimated at the start (the
round trip with the least delay, NTP's rule) and subtracted, so a run whose processes read different
clocks is drawn on one axis too. The offsets and their uncertainty (half the round trip) are kept with
the run; an estimate smaller than its uncertainty (as between processes of one machine, which share
the clock) is not applied.
"""

from lab.train.placement_run.clock import clock_offsets
from lab.train.placement_run.executor import PlacementTrainer
from lab.train.placement_run.pieces import (INPUT, CutPiece, check_placement, link_wait, node_devices, op_scales, pieces,
                                            placed_ranks, with_bytes)
from lab.train.placement_run.plan import (MAX_STAGES, StagePlan, model_for, replanned, resolve, resolved, stage_count,
                                          stage_devices)

__all__ = ["clock_offsets", "PlacementTrainer", "INPUT", "CutPiece", "link_wait", "node_devices", "op_scales", "pieces",
           "placed_ranks", "with_bytes", "MAX_STAGES", "StagePlan", "check_placement", "model_for", "replanned", "resolve",
           "resolved", "stage_count", "stage_devices"]
