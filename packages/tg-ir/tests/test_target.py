"""Device strings: the grammar of DEV ([IFACE[:indices]+]DEVICE[:RENDERER[:ARCH]], ';'-separated) and its errors."""

import pytest

from tg.ir import Context, Target, TargetError, dev_targets


@pytest.mark.parametrize(
    "text, expected",
    [
        ("CPU", Target("CPU")),
        ("cpu", Target("CPU")),
        ("CPU:1", Target("CPU", index=1)),
        ("CPU:0", Target("CPU")),
        ("CPU:CLANG:x86-64-v3", Target("CPU", renderer="CLANG", arch="x86-64-v3")),
        ("CPU:clang:native", Target("CPU", renderer="CLANG", arch="native")),
        ("CPU:LLVM", Target("CPU", renderer="LLVM")),
        ("NULL:CL", Target("NULL", renderer="CL")),
        ("NULL:CUDA:sm_90", Target("NULL", renderer="CUDA", arch="sm_90")),
        ("CUDA::sm_90", Target("CUDA", arch="sm_90")),
        ("HCQ+CPU", Target("CPU", iface="HCQ")),
        ("MOCKKFD+AMD:LLVM:gfx1100", Target("AMD", iface="MOCKKFD", renderer="LLVM", arch="gfx1100")),
        ("PCI:1+AMD", Target("AMD", iface="PCI", indices=(1,))),
        ("PCI:0,2+AMD", Target("AMD", iface="PCI", indices=(0, 2))),
        ("pci:1-3+amd", Target("AMD", iface="PCI", indices=(1, 2, 3))),
        ("AMD:1:LLVM", Target("AMD", index=1, renderer="LLVM")),
        ("DISK:/tmp/x+y:z.bin", Target("DISK", path="/tmp/x+y:z.bin")),
        ("disk:rel/path", Target("DISK", path="rel/path")),
    ],
)
def test_a_device_string_parses_into_its_parts(text: str, expected: Target) -> None:
    (target,) = Target.parse(text)
    assert target == expected
    # the printed form parses back to the same target
    assert Target.parse(str(target)) == (target,)


def test_instance_names_keep_the_index_and_drop_zero() -> None:
    assert Target.parse_one("CPU:1:CLANG").name == "CPU:1"
    assert Target.parse_one("CPU:0").name == "CPU"
    assert Target.parse_one("HCQ+CPU").name == "CPU"
    assert Target.parse_one("DISK:/a/b").name == "DISK:/a/b"


def test_several_targets_are_separated_by_semicolons_and_the_first_is_the_default() -> None:
    targets = Target.parse("MOCKKFD+AMD;CPU:LLVM")
    assert [t.device for t in targets] == ["AMD", "CPU"]
    assert Target.parse("") == ()
    assert Target.parse("   ") == ()


@pytest.mark.parametrize(
    "text, names",
    [
        ("CPU:FOO", "unknown renderer 'FOO'"),
        ("CPU:CLANG:x86-64-v3:extra", "too many ':' parts"),
        ("CPU:CLANG:", "empty arch"),
        ("A+B+CPU", "more than one '+'"),
        ("9X+CPU", "interface '9X'"),
        ("PCI:a+AMD", "interface indices 'a'"),
        ("PCI:3-1+AMD", "runs backwards"),
        ("PCI:1,1+AMD", "name a device twice"),
        ("+CPU", "interface ''"),
        ("CP-U", "device 'CP-U'"),
        ("DISK", "DISK needs a path"),
        ("HCQ+DISK:/x", "DISK takes no interface"),
        ("CPU;;PYTHON", "empty target"),
        ("CPU:CLANG:x86 64", "arch 'x86 64'"),
    ],
)
def test_a_bad_device_string_raises_naming_the_wrong_part(text: str, names: str) -> None:
    with pytest.raises(TargetError, match="device string") as info:
        Target.parse(text)
    assert names in str(info.value)
    assert isinstance(info.value, ValueError)


def test_dev_targets_reads_the_current_dev_setting() -> None:
    with Context(DEV="HCQ+CPU;PYTHON"):
        assert [t.name for t in dev_targets()] == ["CPU", "PYTHON"]
        assert dev_targets()[0].iface == "HCQ"
    with Context(DEV=""):
        assert dev_targets() == ()
    with Context(DEV="CPU:NOPE"), pytest.raises(TargetError, match="NOPE"):
        dev_targets()


def test_a_non_string_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="must be a str"):
        Target.parse(3)  # type: ignore[arg-type]
