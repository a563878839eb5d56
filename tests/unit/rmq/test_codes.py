"""rmq.codes.version_name: ``MQVersion.getVersionDesc`` for every ordinal a header can carry."""

from __future__ import annotations

import pytest

from rmq.codes import Version, version_name


def test_the_named_versions_are_their_ordinals() -> None:
    for v in Version:
        assert version_name(v) == v.name


@pytest.mark.parametrize(
    ("ordinal", "name"),
    [
        (0, "V3_0_0_SNAPSHOT"),
        (15, "V3_0_0_FINAL"),
        (16, "V3_0_1_SNAPSHOT"),
        (45, "V3_0_15"),
        (46, "V3_1_0_SNAPSHOT"),
        (85, "V3_2_9"),
        (86, "V3_3_1_SNAPSHOT"),  # 3.3 to 3.9 have no x.y.0
        (211, "V3_9_9"),
        (212, "V4_0_0_SNAPSHOT"),
        (400, "V4_9_4_SNAPSHOT"),
        (611, "V5_9_9"),
        (612, "HIGHER_VERSION"),  # the enum's last, for anything past it (as getVersionDesc)
        (32767, "HIGHER_VERSION"),
        (-1, "UNKNOWN"),
    ],
)
def test_version_name(ordinal: int, name: str) -> None:
    assert version_name(ordinal) == name
