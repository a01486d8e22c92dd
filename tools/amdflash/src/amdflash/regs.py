"""BAR5 register map of the Navi31 SMUIO ROM controller and PSP (MP0) flash mailbox.

Every offset is a byte offset into BAR5; every register is a 32-bit little-endian dword.
"""

# --- SMUIO ROM controller -------------------------------------------------------------------------------------------
ROM_CNTL = 0x5A380
PAGE_MIRROR_CNTL = 0x5A384
ROM_INDEX = 0x5A390
ROM_DATA = 0x5A394
ROM_SW_CNTL = 0x5A3A0
ROM_SW_STATUS = 0x5A3A4
ROM_SW_COMMAND = 0x5A3A8
ROM_SW_UNUSED = 0x5A3AC  # never accessed by the tool; modelled by the simulator only to flag accesses
ROM_SW_DATA = 0x5A3B0
ROM_SW_DATA_SIZE = 0x100  # 64 dwords, 0x5A3B0..0x5A4AF
GPIO_PAD_MASK = 0x5A504
GPIO_PAD_A = 0x5A508
GPIO_PAD_EN = 0x5A510

# ROM_CNTL fields
ROM_CNTL_CLOCK_GATING_EN = 1 << 0
ROM_CNTL_PRESCALE_SHIFT = 24
ROM_CNTL_PRESCALE_OVERRIDE = 1 << 28
ROM_CNTL_INDEXED_DUMP = 1 << 29  # set by `fw dump`; meaning uncertain
ROM_CNTL_ABSENT = 0xFFFFFFFF

# ROM_SW_CNTL fields (Navi31 puts RETURN_DATA_EN at bit 19, not the public-header bit 18)
ROM_SW_CNTL_DATA_SIZE_MASK = 0xFFFF
ROM_SW_CNTL_COMMAND_SIZE_SHIFT = 16
ROM_SW_CNTL_RETURN_DATA_EN = 0x80000
ROM_SW_CNTL_RETURN_DATA_EN_PUBLIC = 0x40000
ROM_SW_STATUS_DONE = 1
ROM_SW_STATUS_GATED = 0x04000800  # the typical value read when a healthy boot has gated the engine

GPIO_SPI_PADS = 0x780  # bits 10:7 of GPIO_PAD_MASK/A/EN
PAGE_MIRROR_CLEAR = 0xF1FFFFFF  # clears bits 27:25
PAGE_MIRROR_ROMSW = 0x06000000  # ENABLE (bit 25) | USAGE=1 (bit 26)

# --- PSP (MP0) mailbox: C2PMSG_n at 0x58000 + 4*(0x40+n) ------------------------------------------------------------
PSP_DOORBELL = 0x58224  # C2PMSG_73
PSP_COMMAND = 0x582CC  # C2PMSG_115
PSP_COMMAND_DATA = 0x582D0  # C2PMSG_116
PSP_READY = 0x80000000

BAR5_INDEX = 5
BAR5_SIZE = 0x100000

# Navi31 identification
AMD_VENDOR_ID = 0x1002
NAVI31_DEVICE_ID = 0x744C
NAVI31_DEVICES = ((0xFFFF, (NAVI31_DEVICE_ID,)),)
USB_BRIDGE_IDS = ((0x3801, 0x0001), (0xADD1, 0x0001))
LOCK_PREFIX = "AM"
