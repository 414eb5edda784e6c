// aarch64 CFA programs: pointer authentication (DW_CFA_AARCH64_negate_ra_state,
// which toggles and is part of remembered state), frame records, vector registers.
	.cfi_sections .eh_frame, .debug_frame
	.text

	.globl	signed_return
	.type	signed_return, %function
signed_return:
	.cfi_startproc
	paciasp
	.cfi_negate_ra_state
	stp	x29, x30, [sp, -32]!
	.cfi_def_cfa_offset 32
	.cfi_offset 29, -32
	.cfi_offset 30, -24
	mov	x29, sp
	.cfi_def_cfa_register 29
	str	x19, [sp, 16]
	.cfi_offset 19, -16
	.cfi_remember_state
	cbz	x0, 1f
	ldr	x19, [sp, 16]
	ldp	x29, x30, [sp], 32
	.cfi_restore 30
	.cfi_restore 29
	.cfi_restore 19
	.cfi_def_cfa 31, 0
	autiasp
	.cfi_negate_ra_state
	ret
1:
	.cfi_restore_state
	str	d8, [sp, 24]
	.cfi_offset 72, -8
	ldp	x29, x30, [sp], 32
	.cfi_restore 30
	.cfi_restore 29
	.cfi_def_cfa 31, 0
	autiasp
	.cfi_negate_ra_state
	ret
	.cfi_endproc
	.size	signed_return, .-signed_return

	.globl	unsigned_leaf
	.type	unsigned_leaf, %function
unsigned_leaf:
	.cfi_startproc
	sub	sp, sp, 16
	.cfi_def_cfa_offset 16
	add	sp, sp, 16
	.cfi_def_cfa_offset 0
	ret
	.cfi_endproc
	.size	unsigned_leaf, .-unsigned_leaf
	.section .note.GNU-stack,"",@progbits
