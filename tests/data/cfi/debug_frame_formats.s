# A hand-written .debug_frame: a 64-bit DWARF CIE of version 4 (with its
# address_size and segment_selector_size fields) and its FDE, 32-bit CIEs of
# versions 1 and 3, zero padding between entries, and a CIE with code and data
# alignment factors other than 1/-8.  Addresses are constants, so the object
# file needs no relocations and is read as assembled.
	.section .debug_frame,"",@progbits
start:
cie64:
	.long	0xffffffff
	.quad	cie64_end - cie64_id
cie64_id:
	.quad	0xffffffffffffffff
	.byte	4			# version
	.asciz	""
	.byte	8			# address_size
	.byte	0			# segment_selector_size
	.uleb128 4			# code alignment (aarch64-like)
	.sleb128 -8
	.uleb128 30			# return address: x30
	.byte	0x0c, 31, 0		# DW_CFA_def_cfa sp+0
	.balign	8, 0
cie64_end:
fde64:
	.long	0xffffffff
	.quad	fde64_end - fde64_id
fde64_id:
	.quad	cie64 - start
	.quad	0x10000			# initial location
	.quad	0x40			# address range
	.byte	0x41			# DW_CFA_advance_loc 1 (4 bytes)
	.byte	0x2d			# DW_CFA_AARCH64_negate_ra_state
	.byte	0x41
	.byte	0x0e, 32		# DW_CFA_def_cfa_offset 32
	.byte	0x9d, 4			# DW_CFA_offset x29 at cfa-32
	.byte	0x9e, 3			# DW_CFA_offset x30 at cfa-24
	.byte	0x05, 72, 1		# DW_CFA_offset_extended v8 at cfa-8
	.byte	0x42			# DW_CFA_advance_loc 2 (8 bytes)
	.byte	0x0a			# DW_CFA_remember_state
	.byte	0xde, 0xdd		# DW_CFA_restore x30, x29
	.byte	0x0c, 31, 0		# DW_CFA_def_cfa sp+0
	.byte	0x2d
	.byte	0x41
	.byte	0x0b			# DW_CFA_restore_state
	.byte	0x41
	.byte	0x14, 19, 2		# DW_CFA_val_offset x19 = cfa-16
	.byte	0x08, 20		# DW_CFA_same_value x20
	.byte	0x07, 21		# DW_CFA_undefined x21
	.balign	8, 0
fde64_end:
	.long	0			# zero padding
cie_v1:
	.long	cie_v1_end - cie_v1_id
cie_v1_id:
	.long	0xffffffff
	.byte	1
	.asciz	""
	.uleb128 1
	.sleb128 -4
	.byte	8			# v1: the return address column is a byte
	.byte	0x0c, 4, 4		# DW_CFA_def_cfa r4+4
	.byte	0x88, 1			# DW_CFA_offset r8 at cfa-4
	.balign	4, 0
cie_v1_end:
fde_v1:
	.long	fde_v1_end - fde_v1_id
fde_v1_id:
	.long	cie_v1 - start
	.quad	0x20000
	.quad	0x10
	.byte	0x41
	.byte	0x0e, 8			# DW_CFA_def_cfa_offset 8
	.byte	0x85, 2			# DW_CFA_offset r5 at cfa-8
	.byte	0x43
	.byte	0x0d, 5			# DW_CFA_def_cfa_register r5
	.balign	4, 0
fde_v1_end:
cie_v3:
	.long	cie_v3_end - cie_v3_id
cie_v3_id:
	.long	0xffffffff
	.byte	3
	.asciz	""
	.uleb128 2
	.sleb128 -4
	.uleb128 33			# v3: a ULEB128 return address column
	.byte	0x0c, 7, 8		# DW_CFA_def_cfa rsp+8
	.byte	0x05, 33, 2		# DW_CFA_offset_extended r33 at cfa-8
	.balign	4, 0
cie_v3_end:
fde_v3:
	.long	fde_v3_end - fde_v3_id
fde_v3_id:
	.long	cie_v3 - start
	.quad	0x30000
	.quad	0x20
	.byte	0x42			# DW_CFA_advance_loc 2 (4 bytes)
	.byte	0x0e, 16
	.byte	0x86, 2			# DW_CFA_offset rbp at cfa-8
	.byte	0x43
	.byte	0x09, 3, 12		# DW_CFA_register rbx in r12
	.balign	4, 0
fde_v3_end:
	.section .note.GNU-stack,"",@progbits
