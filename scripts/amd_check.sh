#!/usr/bin/env bash
# The AMD backend checked on a real GPU, in one run: what the GPU is, the tiny suite, the HCQ device tests and a
# benchmark line. For a person with an RDNA3 card (RX 7900 class, gfx1100):
#
#   bash scripts/amd_check.sh                    # DEV=AMD: the GPUs KFD exposes (your user in the 'render' group)
#   DEV=PCI+AMD bash scripts/amd_check.sh        # the AM driver over PCI: no kernel driver bound to the GPU (unbind
#                                                # amdgpu or bind vfio-pci), firmware in /lib/firmware/amdgpu or
#                                                # TG_AMD_FW_DIR, access to the device (root, or VFIO permissions);
#                                                # it resets and boots the GPU
#   DEV=USB+AMD bash scripts/amd_check.sh        # the AM driver behind an ASM24 USB bridge (custom firmware): the
#                                                # tiny suite only (amd.md 0, step 5)
#
# CI runs it on the mocks so it cannot rot:
#
#   DEV=MOCKKFD+AMD HCQ_RUNTIME_DEV=PYTHON bash scripts/amd_check.sh
#   DEV=MOCKPCI+AMD HCQ_RUNTIME_DEV=PYTHON bash scripts/amd_check.sh     # the AM driver on the mock AM GPU
#
# Settings: DEV (default AMD), HCQ_RUNTIME_DEV (default auto: the compiled submitter where rings and signals are
# host memory, the interpreted one otherwise, e.g. over USB),
# AMD_CHECK_TIMEOUT (seconds per test, default 120). Tests that need more GPUs than the machine has are skipped.
# What only hardware shows (and the mock cannot): shared/specs/amd.md section 7 and packages/tg-runtime/README.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export DEV="${DEV:-AMD}"
timeout="${AMD_CHECK_TIMEOUT:-120}"
bench_env=()
case "$DEV" in
  MOCK*)
    export TG_MOCKGPU_COUNT="${TG_MOCKGPU_COUNT:-8}"  # test_hcq.py opens instances up to AMD:7
    bench_env=(TG_MOCKGPU_EMU=0)  # the mock's submit cost: packets parsed, kernels not emulated
    ;;
esac

echo "== device ($DEV)"
hatch run python - <<'EOF'
from tg.runtime.device import Device

dev = Device[Device.DEFAULT]
iface, p = dev.iface, dev.iface.props
print(f"{dev!r}: {dev.cu_cnt} CUs in {dev.se_cnt} shader engines, {p.get('simd_count')} SIMDs, "
      f"LDS {p.get('lds_size_in_kb')} KiB, wave{p.get('wave_front_size')}, IP versions {iface.ip_versions}, "
      f"emulated: {dev.emulated}")
if getattr(dev, "am", False):
    am = iface.dev
    print(f"AM driver on {iface.pci.pcibus}: {'partial' if am.partial_boot else 'full'} boot, VRAM "
          f"{am.vram_size >> 20} MiB (BAR0 {am.vram.nbytes >> 20} MiB), host memory mapped: {iface.can_map_host}")
else:
    print(f"KFD interface {'.'.join(map(str, iface.kfd.version))}, GPUs {[g.arch for g in iface.kfd.gpus]}, "
          f"VRAM {p.get('local_mem_size', 0) / 2**30:.1f} GiB")
EOF

tests=(tests/test_tiny.py)
case "$DEV" in
  USB+*|MOCKUSB+*) ;;  # over USB: the tiny suite
  *) tests+=(packages/tg-runtime/tests/test_hcq.py) ;;
esac
echo "== ${tests[*]}"
hatch test -p -- -q --timeout="$timeout" -m "not torch" "${tests[@]}"

case "$DEV" in
  *USB+*) echo "== benchmark: skipped over USB" ;;
  *)
    echo "== benchmark"
    env ${bench_env[@]+"${bench_env[@]}"} hatch run bench:hcq --device "$DEV" --calls 50
    ;;
esac
