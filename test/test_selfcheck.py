"""The backend self-check: agreement on shipped robots, refusal of a model the backends read differently."""
import numpy as np
import pytest

from robot_dynamics.dynamics import Model, SelfCheckError, self_check

TOL = 1e-9  # largest |pinocchio - reference| / max(1, |result|)


@pytest.mark.parametrize("robot", ["panda", "ur5", "kinova", "solo12"])
def test_backends_agree(robot):
    report = self_check(Model.from_robot(robot), n_states=3, tol=TOL)
    assert set(report) >= {"rnea", "crba", "aba", "coriolis", "jacobian", "jacobian_dot"}
    assert max(report.values()) <= TOL


@pytest.mark.parametrize("link", [3, 5])
def test_self_check_names_algorithm_and_joint(link):
    """Link k+1's inertia misread (x 1.01): the check fails naming a dynamics algorithm and a joint
    that carries that link, panda_joint1 .. panda_joint<k+1> (the joints distal to it do not see its
    mass or inertia, an exact fact of the chain, so naming one of them would be wrong).  Not the
    exact joint: the check names where the difference is largest, which for gravity is the shoulder."""
    model = Model.from_robot("panda")
    model.tree.I[link] = model.tree.I[link] * 1.01      # the reference reader "misread" this link
    carriers = "|".join(f"panda_joint{i}" for i in range(1, link + 2))
    with pytest.raises(SelfCheckError,
                       match=rf"(rnea|crba|aba|gravity|nonlinear_effects|coriolis) differs by .* at ({carriers});"):
        self_check(model, n_states=2)


def test_self_check_report_without_raising():
    """raise_on_failure=False returns the report: a misread inertia shows in every mass-dependent
    algorithm (above the tolerance), not in the kinematics (frame placement, Jacobians: inertia plays
    no part there), and the intact model is within the tolerance everywhere."""
    model = Model.from_robot("panda")
    model.tree.I[3] = model.tree.I[3] * 1.01
    bad = self_check(model, raise_on_failure=False, tol=TOL)
    for algo in ("rnea", "gravity", "nonlinear_effects", "crba", "aba", "coriolis", "kinetic_energy",
                 "potential_energy"):
        assert bad[algo] > 1e3 * TOL, (algo, bad[algo])
    for algo in ("frame_placement", "jacobian", "jacobian_dot"):
        assert bad[algo] <= TOL, (algo, bad[algo])
    good = self_check(Model.from_robot("panda"), raise_on_failure=False, tol=TOL)
    assert set(good) == set(bad) and max(good.values()) <= TOL
