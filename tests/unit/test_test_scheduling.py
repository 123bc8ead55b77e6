"""The order in which two pytest workers take the test groups (tests/conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass

from tests.conftest import estimated_seconds, group_of, scheduling_order


@dataclass
class Item:
    nodeid: str
    slow: bool = False

    def get_closest_marker(self, name: str) -> object:
        return object() if name == "slow" and self.slow else None


def test_a_folder_kept_together_is_one_group_and_any_other_module_its_own():
    assert group_of("tests/integration/test_lifecycle.py::test_a") == group_of("tests/gates/test_policy_gates.py::test_b")
    assert group_of("tests/scripts/test_launch.py::test_a") == group_of("tests/scripts/test_stop.py::test_b")
    assert group_of("tests/unit/test_a.py::test_x") == "tests/unit/test_a.py"
    assert group_of("tests/unit/test_a.py::test_x[1]") == group_of("tests/unit/test_a.py::test_y")


def test_the_emulator_and_image_groups_come_first_then_the_longest_groups():
    items = [
        Item("tests/unit/test_quick.py::test_1"), Item("tests/unit/test_quick.py::test_2"),
        Item("tests/unit/test_one_slow.py::test_1", slow=True),
        Item("tests/image/test_image_jobs.py::test_1"),
        Item("tests/trainer/test_many_slow.py::test_1", slow=True), Item("tests/trainer/test_many_slow.py::test_2", slow=True),
        Item("tests/unit/test_quick.py::test_3"),
        Item("tests/integration/test_lifecycle.py::test_1"),
    ]
    order = [item.nodeid for item in scheduling_order(items)]
    assert order == [
        "tests/integration/test_lifecycle.py::test_1",
        "tests/image/test_image_jobs.py::test_1",
        "tests/trainer/test_many_slow.py::test_1", "tests/trainer/test_many_slow.py::test_2",
        "tests/unit/test_one_slow.py::test_1",
        "tests/unit/test_quick.py::test_1", "tests/unit/test_quick.py::test_2", "tests/unit/test_quick.py::test_3",
    ]
    assert estimated_seconds(items[:3]) > estimated_seconds(items[:2]) * 10
