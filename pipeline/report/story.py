"""A run's findings told as one story: a verdict, the likely root cause with the findings it explains, and one
recommendation.

Thirty rules looking at one degenerating run flag the same event several times: a length collapse shows up as a
grad-norm spike on the short batches and as a reward collapse a few steps later, and each rule's own advice
repeats or contradicts the others'. Reading them as one story needs three decisions, made here:

- *Root cause*: the earliest error-level finding (a warn-level one when there is no error; a transient one only
  when nothing else is flagged). Onsets are noisy by a few logged steps, so findings that start within a short
  window of that one compete, and a cause (length collapse) wins over a symptom (grad-norm spike) and an outcome
  (reward collapse): the rule's `-- role:`. Onsets a few logged intervals apart cannot be ordered at all: of those,
  the finding that lasts is the root cause of the one that passed. A finding about operations (a slow checkpoint,
  steps logged twice) is the root cause only when nothing about the learning is as severe, and is never the cause
  or the consequence of a learning finding.
- *Consequences*: other rules' warn/error findings that start at the root cause's onset or within the window after
  it, and, when its episode ended, within a few logged steps of its end (what a one-step spike caused shows soon
  after it, not 150 steps later). A rule whose condition already held when the root cause began (an episode under
  way then, or over within the window before) is not its consequence at any episode. Symptoms and outcomes under
  way or just over when it was flagged are *related*, not consequences: a detector can fire before the cause's own
  (a reward falling while the length has not yet crossed its bar), so they belong to the story, but nothing that
  came first can be called caused by what came after. The root cause's own rule flagging again is the root cause
  again, not a consequence of it. A rule whose mechanism limits what it can cause (`-- explains:`) has only those
  rules' findings as consequences or related: a reward term that never varies explains no plateau, tied groups no
  reward collapse.
- *Transient symptoms*: a spike (a symptom) that ended and was followed by no cause or outcome it could have
  caused (starting before its end or a few logged steps after) is noted, but weighs as a warning: an isolated KL
  spike the run recovered from does not make it unhealthy.
- *Recommendation*: the rules' actions (`-- advice:`) in story order, one per lever and direction; an action
  pointing a lever the other way than an earlier one is dropped and said (never "raise the learning rate" after
  "lower the learning rate").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import pairwise

from pipeline.checks import ROLES, SEVERITIES, Check

MAX_ACTIONS = 6
WINDOW_SHARE = 0.15  # the story window: this share of the run's logged span of steps ...
WINDOW_POINTS = 3  # ... and at least this many logged intervals
LAG_POINTS = 10  # what an episode that ended caused shows within this many logged intervals of its end: the rules
# judge smoothed shares over 10-20 logged steps, so an effect's onset is placed up to about that late


@dataclass
class Story:
    verdict: str  # healthy | watch | unhealthy
    root: dict | None
    findings: list[dict]  # every finding, each with "consequence_of" (a check name or None), in story order
    actions: list[dict] = field(default_factory=list)  # {"text", "lever", "direction", "because": [checks]}
    overruled: list[str] = field(default_factory=list)  # actions dropped for pointing a lever the other way
    window: float = 0.0
    lag: float = 0.0  # LAG_POINTS logged intervals, in steps

    @property
    def recommendation(self) -> str:
        if not self.actions:
            return (
                "No action needed: nothing at warn or error level."
                if self.verdict == "healthy"
                else "No specific action: read the findings."
            )
        return " ".join(f"{i}. {a['text']}." for i, a in enumerate(self.actions, 1))


def weight(finding: dict) -> str:
    """The severity a finding carries in the verdict: a transient symptom's error weighs as a warning."""
    return "warn" if finding.get("transient") and finding["severity"] == "error" else finding["severity"]


def severity_said(finding: dict) -> str:
    """A finding's severity as the verdict line says it: `error`, or `error, transient: ended at step 111` for a
    transient symptom, whose error weighs as a warning (a verdict of watch with an error-level root cause, and a
    `check --fail-on error` that stops on the flag, then read as one account)."""
    if not finding.get("transient"):
        return finding["severity"]
    return f"{finding['severity']}, transient: ended at step {finding['step_end']}"


def verdict_of(findings: list[dict]) -> str:
    severities = {weight(f) for f in findings}
    return "unhealthy" if "error" in severities else "watch" if "warn" in severities else "healthy"


def reach(finding: dict, window: float, lag: float) -> int:
    """The last step at which something this finding caused can start: within the story window of its onset and,
    once its episode has ended, within ``lag`` of its end. A one-step grad-norm spike the run recovered from at
    step 179 does not explain a reward trend first flagged 151 steps later, however long the window of a long run."""
    last = finding["step"] + window
    return math.floor(last if finding["step_end"] is None else min(last, finding["step_end"] + lag))


def _mark_transient(placed: list[dict], rules: dict[str, Check], window: float, lag: float) -> None:
    for f in placed:
        rule = rules.get(f["check"])
        f["transient"] = bool(
            rule is not None
            and rule.role == "symptom"
            and f["step_end"] is not None
            and not any(
                g is not f
                and _rank(rules, g) != ROLES.index("symptom")
                and f["step"] <= g["step"] <= reach(f, window, lag)
                for g in placed
            )
        )


def _interval(steps: list[int]) -> int:
    """The run's usual logging interval, in steps: the median gap between logged steps."""
    gaps = sorted(b - a for a, b in pairwise(sorted(set(steps))))
    return gaps[len(gaps) // 2] if gaps else 1


def story_window(steps: list[int]) -> float:
    """How close two onsets must be, in steps, to be one event: a share of the run's span, never less than a few
    logged intervals (a run logged every 10 steps cannot place an onset closer than that)."""
    if len(steps) < 2:
        return 0.0
    return max(WINDOW_POINTS * _interval(steps), WINDOW_SHARE * (max(steps) - min(steps)))


def _rank(rules: dict[str, Check], finding: dict) -> int:
    rule = rules.get(finding["check"])
    return ROLES.index(rule.role) if rule is not None else 0


def _operations(rules: dict[str, Check], finding: dict) -> bool:
    rule = rules.get(finding["check"])
    return rule is not None and rule.role == "operations"


def _duration(finding: dict) -> float:
    """How long a finding's episode lasted, in steps: one not over when the run was last logged lasts longest."""
    return float("inf") if finding["step_end"] is None else finding["step_end"] - finding["step"]


def _severity(finding: dict) -> int:
    return SEVERITIES.index(finding["severity"])


def tell(findings: list[dict], rules: dict[str, Check], steps: list[int]) -> Story:
    """The story of one run's findings (dicts with check, severity, step, step_end, ...); ``steps`` are the run's
    logged steps, for the window."""
    window = story_window(steps)
    lag = min(window, LAG_POINTS * _interval(steps))
    findings = [dict(f, consequence_of=None, related_to=None, transient=False) for f in findings]
    placed = [f for f in findings if f["step"] is not None and f["severity"] in ("warn", "error")]
    _mark_transient(placed, rules, window, lag)
    pool = [f for f in placed if weight(f) == "error"] or placed
    pool = [f for f in pool if not f["transient"]] or pool  # a spike the run recovered from explains little
    pool = [f for f in pool if not _operations(rules, f)] or pool  # the learning's story when there is one
    root = None
    if pool:
        first = min(f["step"] for f in pool)
        rivals = [f for f in pool if f["step"] <= first + window]
        best = min(_rank(rules, f) for f in rivals)  # a cause wins over a symptom, a symptom over an outcome
        rivals = [f for f in rivals if _rank(rules, f) == best]
        start = min(f["step"] for f in rivals)
        # Onsets a few logged steps apart are one onset as far as the log can tell, and then the finding that
        # lasts explains the one that passed, not the reverse: ties in 80% of groups from the first step to the
        # run's end are not caused by a 10% truncation over the same first five steps.
        together = [f for f in rivals if f["step"] <= start + WINDOW_POINTS * _interval(steps)]
        root = max(together, key=lambda f: (_severity(f), _duration(f), -f["step"]))
        _attribute(root, placed, rules, window, lag)

    def order(f: dict) -> tuple:
        if f is root:
            return (0, 0, 0)
        if f["consequence_of"] or f["related_to"]:
            return (1, f["step"], -_severity(f))
        return (2, -_severity(f), f["step"] if f["step"] is not None else -1)

    findings.sort(key=order)
    story = Story(verdict_of(findings), root, findings, window=window, lag=lag)
    _recommend(story, rules)
    return story


def _attribute(root: dict, placed: list[dict], rules: dict[str, Check], window: float, lag: float) -> None:
    """Mark the findings the root cause explains (``consequence_of``) and those of the same event that fired just
    before it (``related_to``)."""
    cause = rules.get(root["check"])
    story = [
        f
        for f in placed
        if f is not root
        and f["check"] != root["check"]  # its own rule again is the root cause, not a consequence
        and _operations(rules, f) == _operations(rules, root)  # no learning finding follows from operations
        and (cause is None or cause.explains is None or f["check"] in cause.explains)  # nor what it cannot cause
    ]
    for f in story:  # one event: a symptom or outcome still under way, or just over, when the cause was flagged
        if f["step"] < root["step"] <= reach(f, window, lag) and _rank(rules, f) > _rank(rules, root):
            f["related_to"] = root["check"]
    # A rule whose condition already held when the root cause began (an episode under way at its onset, or ended
    # within the window before it) and that is not one event with it (related) is no consequence of it, at any of
    # its episodes: tied groups on 57% of steps before a truncation began and 60% after it are not its effect.
    held = {
        f["check"]
        for f in story
        if f["step"] < root["step"]
        and not f["related_to"]
        and (f["step_end"] is None or f["step_end"] >= root["step"] - window)
    }
    for f in story:
        if f["check"] not in held and root["step"] <= f["step"] <= reach(root, window, lag):
            f["consequence_of"] = root["check"]


def _recommend(story: Story, rules: dict[str, Check]) -> None:
    chosen: dict[str, dict] = {}  # lever -> action
    for finding in story.findings:
        if finding["severity"] not in ("warn", "error"):
            continue
        rule = rules.get(finding["check"])
        for advice in rule.advice if rule else ():
            taken = chosen.get(advice.lever)
            if taken is None:
                if len(chosen) < MAX_ACTIONS:
                    chosen[advice.lever] = {
                        "text": advice.text,
                        "lever": advice.lever,
                        "direction": advice.direction,
                        "because": [finding["check"]],
                    }
            elif taken["direction"] == advice.direction or advice.direction == "do":
                if finding["check"] not in taken["because"]:
                    taken["because"].append(finding["check"])
            else:
                said = (
                    f'{finding["check"]} would say "{advice.text}"; not advised, because '
                    f"{taken['because'][0]} (advised before it) points {advice.lever} {taken['direction']}"
                )
                if said not in story.overruled:  # a rule's every episode would say it again
                    story.overruled.append(said)
    story.actions = list(chosen.values())
