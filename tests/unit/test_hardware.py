"""labsupport.topics.hardware (notebook 06, section 6): INT8-relevant CPU features and what they mean for ORT's kernels."""

from __future__ import annotations

from labsupport.topics.hardware import CpuFeatures, cpu_features, parse_cpuinfo

X86_CPUINFO = """processor : 0
vendor_id : GenuineIntel
flags : fpu sse sse2 avx avx2 fma avx512f avx512bw avx512_vnni
"""
ARM_CPUINFO = """processor : 0
Features : fp asimd evtstrm aes asimddp i8mm
"""
OLD_CPUINFO = "flags : fpu sse sse2 avx\n"
AVX2_CPUINFO = "flags : fpu sse sse2 avx avx2 fma f16c\n"


def test_parse_cpuinfo_x86_arm_and_old():
    x86 = parse_cpuinfo(X86_CPUINFO, "x86_64")
    assert x86.features["avx512_vnni"] and x86.features["avx2"] and not x86.features["amx_int8"]
    assert x86.int8_dot_product and "dot-product" in str(x86)
    arm = parse_cpuinfo(ARM_CPUINFO, "aarch64")
    assert arm.features["asimddp"] and arm.features["i8mm"] and arm.int8_dot_product and arm.is_arm
    old = parse_cpuinfo(OLD_CPUINFO, "x86_64")
    assert not old.int8_dot_product and "No INT8 dot-product" in str(old)


def test_arm_is_recognised_from_the_flags_when_the_arch_is_not_given():
    assert set(parse_cpuinfo(ARM_CPUINFO, "unknown").features) == {"asimd", "asimddp", "i8mm", "bf16", "sve", "fphp"}


def test_which_cpus_saturate_u8s8_products():
    avx2 = parse_cpuinfo(AVX2_CPUINFO, "x86_64")
    assert avx2.u8s8_saturates and "VPMADDUBSW" in str(avx2)
    vnni = parse_cpuinfo(X86_CPUINFO, "x86_64")
    assert not vnni.u8s8_saturates and "exactly" in str(vnni)
    arm = parse_cpuinfo(ARM_CPUINFO, "aarch64")
    assert not arm.u8s8_saturates and "exactly" in str(arm)


def test_nothing_found_says_so():
    unknown = CpuFeatures("riscv64", "nothing readable on Plan9", {})
    assert not unknown.int8_dot_product and not unknown.u8s8_saturates
    assert "none found" in str(unknown) and "(read from nothing readable on Plan9)" in str(unknown)


def test_cpu_features_on_this_machine():
    cpu = cpu_features()
    assert cpu.arch and cpu.source
    assert isinstance(cpu.int8_dot_product, bool) and isinstance(cpu.u8s8_saturates, bool)
    assert str(cpu).startswith(f"CPU architecture: {cpu.arch}")
