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


def test_self_check_names_algorithm_and_joint():
    model = Model.from_robot("panda")
    model.tree.I[3] = model.tree.I[3] * 1.01      # the reference reader "misread" link 4's inertia
    with pytest.raises(SelfCheckError, match=r"(rnea|crba|aba|gravity|nonlinear|coriolis).*panda_joint"):
        self_check(model, n_states=2)
    assert np.isfinite(self_check(model, raise_on_failure=False)["rnea"])
