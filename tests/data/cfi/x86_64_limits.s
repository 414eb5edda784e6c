# CFA programs a decoder must refuse: remember_state nested deeper than any
# compiler nests it, restore_state with nothing remembered, a CFA offset change
# while the CFA is an expression, and an unknown DW_CFA opcode.
	.text
	.globl	deep_state
deep_state:
	.cfi_startproc
	nop
	.rept	70
	.cfi_remember_state
	.endr
	nop
	.cfi_endproc

	.globl	unbalanced_state
unbalanced_state:
	.cfi_startproc
	nop
	.cfi_escape 0x0b
	nop
	.cfi_endproc

	.globl	offset_of_expression
offset_of_expression:
	.cfi_startproc
	nop
	.cfi_escape 0x0f, 0x02, 0x77, 0x08
	.cfi_escape 0x0e, 0x10
	nop
	.cfi_endproc

	.globl	unknown_opcode
unknown_opcode:
	.cfi_startproc
	nop
	.cfi_escape 0x3f
	nop
	.cfi_endproc
	.section .note.GNU-stack,"",@progbits
