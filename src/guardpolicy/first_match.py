"""First-match rule lists: when can a rule never fire?

Policy rules (data/policies/*.yaml) and fact rules (data/pool.yaml, data/benchmark_facts.yaml) are both
first-match-wins lists. A rule placed below one that matches every prompt it matches silently counts 0; both
registries refuse such a rule with `unreachable_rule`, each naming the rules in its own terms. A leaf module
(no project imports), so that the pool registry and the labeling package share it without importing each
other.
"""

from __future__ import annotations

from dataclasses import dataclass

Variable = tuple[str, str]  # (kind, name): ("column", "label"), ("fact", "composed"), ...


@dataclass(frozen=True)
class Clause:
    """A first-match rule's condition in a normal form that can be compared with another rule's.

    Every `required` variable must take a value in its set, and each of `groups` needs at least one of its
    (variable, values) literals to hold. A variable a clause does not name may take any value (a column may
    hold text no rule lists; a fact, pillar or source may be present or absent).
    """

    required: dict[Variable, frozenset[object]]
    groups: tuple[tuple[tuple[Variable, frozenset[object]], ...], ...] = ()

    def boxes(self) -> list[dict[Variable, frozenset[object]]]:
        """The clause as a union of product sets: one box per choice of a literal from each group.

        A box maps each constrained variable to its allowed values (unnamed variables are unconstrained);
        empty boxes are left out, so a clause that can never hold has none.
        """
        if any(not values for values in self.required.values()):
            return []
        boxes = [dict(self.required)]
        for group in self.groups:
            grown = []
            for box in boxes:
                for variable, values in group:
                    allowed = box[variable] & values if variable in box else values
                    if allowed:
                        grown.append({**box, variable: allowed})
            boxes = grown
        return boxes

    def holds_on(self, box: dict[Variable, frozenset[object]]) -> bool:
        """Whether the clause holds for *every* assignment in `box`.

        Exact because a box is a product set: a conjunction holds on it iff each conjunct does, and a
        disjunction of literals on different variables iff one literal does (otherwise one point that
        breaks them all can be put together variable by variable).
        """

        def within(variable: Variable, values: frozenset[object]) -> bool:
            return variable in box and box[variable] <= values

        return all(within(v, values) for v, values in self.required.items()) and all(
            any(within(v, values) for v, values in group) for group in self.groups
        )

    def implies(self, other: Clause) -> bool:
        """Every assignment this clause holds for, `other` holds for too (vacuously, if this never holds)."""
        return all(other.holds_on(box) for box in self.boxes())


def unreachable_rule(clauses: list[Clause]) -> tuple[int, int | None] | None:
    """The first rule (index) of a first-match list that can never fire, with the earlier rule that always
    fires before it (None when its condition can never hold at all); None when every rule can fire.

    Only single earlier rules are compared: a rule covered by two earlier ones together is not found.
    """
    for later, clause in enumerate(clauses):
        if not clause.boxes():
            return later, None
        for earlier in range(later):
            if clause.implies(clauses[earlier]):
                return later, earlier
    return None
