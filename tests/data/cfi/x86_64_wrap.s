# Rules whose address arithmetic wraps past 2^64, for the rule executor's
# tests (tests/system/test_executor.py).  Both paths of the stepper must mask
# CFA + offset to 64 bits, and both must run DWARF expressions.
	.text

# CFA = rsp + 16; the return address is saved at CFA + 0x1010, an address
# that lies past 2^64 when the stack sits at the top of the address space.
	.globl	wraps
	.type	wraps, @function
wraps:
	.cfi_startproc
	.cfi_def_cfa %rsp, 16
	.cfi_offset %rip, 0x1010
	nop
	ret
	.cfi_endproc
	.size	wraps, .-wraps

# DW_CFA_def_cfa_expression: DW_OP_breg7 (rsp) +8.
# DW_CFA_expression rip: DW_OP_breg7 (rsp) +0x1018, which wraps as well.
	.globl	by_expression
	.type	by_expression, @function
by_expression:
	.cfi_startproc
	.cfi_escape 0x0f, 0x02, 0x77, 0x08
	.cfi_escape 0x10, 0x10, 0x03, 0x77, 0x98, 0x20
	nop
	nop
	ret
	.cfi_endproc
	.size	by_expression, .-by_expression
