"""What a check returns: a CheckResult, and the small helpers every check uses to word one."""

from __future__ import annotations

from dataclasses import dataclass, field

# How many examples a failure keeps in its details (and names in its explanation).
FIRST_FEW = 5
LOST_IDS_SHOWN = 10


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one check: passed or not, one short sentence for a person, and details.

    `judged` counts what the check examined; `vacuous` is true when that is nothing, in which case
    `passed` is False: a check that saw nothing has proved nothing."""

    name: str
    passed: bool
    explanation: str
    details: dict = field(default_factory=dict)
    judged: int = 0
    vacuous: bool = False
    # False: the check cannot judge this run's nodes at all (windows_synced of nodes that report no
    # windows): neither passed nor failed, and left out of the outcome (harness.verdict.outcome_of).
    applicable: bool = True

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "passed": self.passed,
            "explanation": self.explanation,
            "details": self.details,
            "judged": self.judged,
            "vacuous": self.vacuous,
            **({} if self.applicable else {"applicable": False}),
        }


def not_applicable_result(name: str, why: str, details: dict) -> CheckResult:
    """The result of a check that cannot judge this kind of run (`why` says so)."""
    return CheckResult(name, False, f"not applicable: {why}", details, judged=0, applicable=False)


def vacuous_result(name: str, nothing: str, details: dict) -> CheckResult:
    """The result of a check that judged nothing (`nothing` says of what)."""
    return CheckResult(name, False, f"judged nothing: {nothing}", details, judged=0, vacuous=True)


def fmt_t(t: float | None) -> str:
    """A time as explanations write it ("never" for None)."""
    return "never" if t is None else f"t={t:.3f}"


def link_name(sender: str, receiver: str) -> str:
    """A directed link as explanations and details name it, "X->Y"."""
    return f"{sender}->{receiver}"


def only_loopback(delivered: int, loopback: int) -> str | None:
    """What a check of deliveries judged nothing of when every delivery was a sender's own
    multicast, handed up inside the sender and never on the network (None: some were not)."""
    if delivered and loopback == delivered:
        return f"only loopback deliveries ({loopback}: senders' own multicasts, which never cross the network)"
    return None
