"""What one step of a placement run keeps between its actions (:class:`Step`), and the interpreter that runs a piece
node by node to time its operators (:class:`Timed`)."""
from __future__ import annotations

import time

import torch
import torch.fx as fx

from lab.train.placement_run.pieces import NODE_NAME, CutPiece


def _model_name(n: fx.Node) -> str:
    """The node's name in the whole model's graph, which the plan's operators go by (a piece names its own afresh)."""
    return n.meta.get(NODE_NAME, n.name)


class Timed(fx.Interpreter):
    """Runs a piece node by node and stamps each operator from its first node (nodes it does not own but
    that come before it, such as shape arithmetic, included) to its last on ``clock``, and reports it to ``run``
    (the executor adds its emulated wait)."""

    def __init__(self, run, piece: CutPiece, micro: int, clock=time.perf_counter):
        super().__init__(piece.module)
        self.run_, self.piece, self.micro, self.clock = run, piece, micro, clock
        self.last = {}  # operator -> its last node in the piece
        for n in piece.module.graph.nodes:
            if run.owner.get(_model_name(n)) is not None:
                self.last[run.owner[_model_name(n)]] = n.name
        self.opened: float | None = None

    def run_node(self, n: fx.Node):
        if n.op in ("placeholder", "output", "get_attr"):
            return super().run_node(n)
        if self.opened is None:
            self.opened = self.clock()
        out = super().run_node(n)
        op = self.run_.owner.get(_model_name(n))
        if op is not None and self.last.get(op) == n.name:
            self.run_.op_done(self.piece, self.micro, op, self.opened, self.clock())
            self.opened = None
        return out

    def run(self, *args):
        out = super().run(*args)
        if self.opened is not None:  # nodes after the piece's last operator
            self.run_.op_done(self.piece, self.micro, None, self.opened, self.clock())
            self.opened = None
        return out


class Step:
    """What one step of a placement run keeps between its actions: the micro-batches, every piece's outputs
    and inputs per micro-batch, tensors received, gradients on their way back, and the step's sums."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, micro_batches: int, train: bool):
        self.xs, self.ys = x.tensor_split(micro_batches), y.tensor_split(micro_batches)
        self.batch, self.train = x.shape[0], train
        self.acts: dict = {}  # (piece, micro) -> the piece's outputs
        self.leaves: dict = {}  # (piece, micro) -> the inputs it ran on (their gradients go back)
        self.received: dict = {}  # Message -> a tensor from another device, received once per micro-batch
        self.losses: dict = {}
        self.grad: dict = {}  # (piece, output, micro) -> gradient summed over its readers on this device
        self.remote: dict = {}  # (piece, output, micro) -> gradient for a tensor received from another device
        self.loss_total, self.correct, self.compute = 0.0, 0, 0.0
        self.saved: dict = {}  # (piece, micro) -> bytes its forward saved for the backward (when measured)
        # (piece, micro) -> what a split backward's weight gradient needs from its input gradient: torch's parameter
        # groups, or None when the piece has no input to take a gradient of (its whole backward waits for then)
        self.split: dict = {}
        self.held = self.peak = 0.0
