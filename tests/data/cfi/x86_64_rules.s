# CFA programs with known contents for the DWARF CFI decoder tests.
# Every function exercises some DW_CFA instructions; readelf's frames-interp
# table of the linked object is the reference the tests compare against.
	.cfi_sections .eh_frame, .debug_frame
	.text

	.globl	frame_pointer
	.type	frame_pointer, @function
frame_pointer:
	.cfi_startproc
	pushq	%rbp
	.cfi_def_cfa_offset 16
	.cfi_offset %rbp, -16
	movq	%rsp, %rbp
	.cfi_def_cfa_register %rbp
	pushq	%rbx
	pushq	%r12
	.cfi_offset %rbx, -24
	.cfi_offset %r12, -32
	nop
	popq	%r12
	.cfi_restore %r12
	popq	%rbx
	.cfi_restore %rbx
	popq	%rbp
	.cfi_def_cfa %rsp, 8
	.cfi_restore %rbp
	ret
	.cfi_endproc
	.size	frame_pointer, .-frame_pointer

	.globl	registers_and_state
	.type	registers_and_state, @function
registers_and_state:
	.cfi_startproc
	movq	%rbx, %r11
	.cfi_register %rbx, %r11
	subq	$24, %rsp
	.cfi_adjust_cfa_offset 24
	.cfi_remember_state
	testq	%rdi, %rdi
	jz	1f
	addq	$24, %rsp
	.cfi_adjust_cfa_offset -24
	.cfi_undefined %rip
	.cfi_same_value %rbx
	ret
1:
	.cfi_restore_state
	.cfi_val_offset %r13, -16
	nop
	.cfi_remember_state
	.cfi_remember_state
	.cfi_offset %r14, -40
	nop
	.cfi_restore_state
	nop
	.cfi_restore_state
	addq	$24, %rsp
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
	.size	registers_and_state, .-registers_and_state

	.globl	expressions
	.type	expressions, @function
expressions:
	.cfi_startproc
	nop
	# DW_CFA_advance_loc 0: a row of zero length
	.cfi_escape 0x40, 0x0e, 0x10
	# DW_CFA_def_cfa_expression: DW_OP_breg7 (rsp) 8; DW_OP_deref
	.cfi_escape 0x0f, 0x03, 0x77, 0x08, 0x06
	nop
	# DW_CFA_expression rbp: DW_OP_breg6 (rbp) -16
	.cfi_escape 0x10, 0x06, 0x02, 0x76, 0x70
	# DW_CFA_val_expression rbx: DW_OP_breg3 (rbx) 16; DW_OP_lit4; DW_OP_plus
	.cfi_escape 0x16, 0x03, 0x04, 0x73, 0x10, 0x34, 0x22
	nop
	# DW_CFA_def_cfa rsp, 8: back from an expression to register+offset
	.cfi_escape 0x0c, 0x07, 0x08
	nop
	ret
	.cfi_endproc
	.size	expressions, .-expressions

	.globl	escapes
	.type	escapes, @function
escapes:
	.cfi_startproc
	pushq	$0
	.cfi_adjust_cfa_offset 8
	# DW_CFA_GNU_args_size 8
	.cfi_escape 0x2e, 0x08
	nop
	# DW_CFA_GNU_negative_offset_extended rbx, 2 (rbx at cfa+16)
	.cfi_escape 0x2f, 0x03, 0x02
	# DW_CFA_offset_extended_sf r12, 3 (at cfa-24); DW_CFA_offset_extended r13, 4 (cfa-32)
	.cfi_escape 0x11, 0x0c, 0x03, 0x05, 0x0d, 0x04
	# DW_CFA_val_offset_sf r14, -1 (r14 = cfa+8)
	.cfi_escape 0x15, 0x0e, 0x7f
	nop
	# DW_CFA_def_cfa_sf rsp, -3 (cfa = rsp+24); DW_CFA_def_cfa_offset_sf -4 (rsp+32)
	.cfi_escape 0x12, 0x07, 0x7d
	nop
	.cfi_escape 0x13, 0x7c
	# DW_CFA_restore_extended rbx; DW_CFA_nop
	.cfi_escape 0x06, 0x03, 0x00
	# xmm0 (17) at cfa+16: gas needs DW_CFA_offset_extended_sf for it
	.cfi_offset 17, 16
	# DW_CFA_GNU_args_size 0
	.cfi_escape 0x2e, 0x00
	nop
	.skip	300, 0x90
	.cfi_def_cfa_offset 16
	.skip	70000, 0x90
	.cfi_def_cfa_offset 8
	popq	%rax
	ret
	.cfi_endproc
	.size	escapes, .-escapes

	.globl	signal_trampoline
	.type	signal_trampoline, @function
	nop
signal_trampoline:
	.cfi_startproc
	.cfi_signal_frame
	# the kernel's rt_sigframe: cfa = [rsp + 160]
	.cfi_escape 0x0f, 0x03, 0x77, 0xa0, 0x01
	.cfi_escape 0x0f, 0x04, 0x77, 0xa0, 0x01, 0x06
	.cfi_escape 0x10, 0x10, 0x03, 0x77, 0xa8, 0x01
	movq	$15, %rax
	syscall
	.cfi_endproc
	.size	signal_trampoline, .-signal_trampoline

	.globl	with_personality
	.type	with_personality, @function
with_personality:
	.cfi_startproc
	.cfi_personality 0x9b, DW.ref.personality_routine
	.cfi_lsda 0x1b, lsda_of_with_personality
	pushq	%rbx
	.cfi_def_cfa_offset 16
	.cfi_offset %rbx, -16
	popq	%rbx
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
	.size	with_personality, .-with_personality

	.hidden	personality_routine
	.type	personality_routine, @function
personality_routine:
	.cfi_startproc
	.cfi_personality 0x1b, personality_routine
	ret
	.cfi_endproc
	.size	personality_routine, .-personality_routine

	.section .rodata
lsda_of_with_personality:
	.byte	0xff, 0xff, 0x01, 0x00

	.section .data.rel.local.DW.ref.personality_routine,"aw"
	.align	8
	.type	DW.ref.personality_routine, @object
	.size	DW.ref.personality_routine, 8
DW.ref.personality_routine:
	.quad	personality_routine
	.section .note.GNU-stack,"",@progbits
