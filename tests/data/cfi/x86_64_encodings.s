# Hand-written .eh_frame entries for what gas never emits by itself: every
# DW_EH_PE value format for FDE addresses, CIE versions 1 and 3, DW_CFA_set_loc,
# advance_loc1/2/4 and MIPS_advance_loc8, personality and LSDA pointers in many
# encodings.  The FDEs describe made-up ranges at 0x1000000 and up (no code is
# needed there); PERS and LSDA are absolute symbols the tests look up.
	.set	PERS, 0x4321
	.set	LSDA, 0x5678

# cie VERSION, FDE-ENCODING, PERSONALITY-ENCODING, LSDA-ENCODING, AUGMENTATION
	.macro	cie label, version, fde_enc, pers_enc, lsda_enc, aug
\label:
	.long	\label\()_end - \label\()_id
\label\()_id:
	.long	0
	.byte	\version
	.asciz	"\aug"
	.uleb128 1
	.sleb128 -8
	.if	\version == 1
	.byte	16
	.else
	.uleb128 16
	.endif
	.uleb128 \label\()_aug_end - \label\()_aug
\label\()_aug:
	.ifnc	\pers_enc, none
	.byte	\pers_enc
	pointer	\pers_enc, PERS
	.endif
	.ifnc	\lsda_enc, none
	.byte	\lsda_enc
	.endif
	.byte	\fde_enc
\label\()_aug_end:
	.byte	0x0c, 0x07, 0x08	# DW_CFA_def_cfa rsp+8
	.byte	0x90, 0x01		# DW_CFA_offset r16 (ra) at cfa-8
	.balign	4, 0
\label\()_end:
	.endm

# pointer ENCODING, VALUE: VALUE in ENCODING's format (pcrel applied by the assembler)
	.macro	pointer enc, value
	.if	(\enc & 0x70) == 0x10
	data	\enc, (\value - .)
	.else
	data	\enc, \value
	.endif
	.endm

	.macro	data enc, value
	.if	(\enc & 0x0f) == 0x00 || (\enc & 0x0f) == 0x04 || (\enc & 0x0f) == 0x0c
	.quad	\value
	.elseif	(\enc & 0x0f) == 0x02 || (\enc & 0x0f) == 0x0a
	.short	\value
	.elseif	(\enc & 0x0f) == 0x03 || (\enc & 0x0f) == 0x0b
	.long	\value
	.elseif	(\enc & 0x0f) == 0x01
	.uleb128 \value
	.else
	.sleb128 \value
	.endif
	.endm

# fde CIE, FDE-ENCODING, START, LENGTH, HAS-LSDA: the same program each time
	.macro	fde label, cie, fde_enc, start, length, lsda_enc
\label:
	.long	\label\()_end - \label\()_id
\label\()_id:
	.long	\label\()_id - \cie
	pointer	\fde_enc, \start
	pointer	(\fde_enc & 0x0f), \length
	.uleb128 \label\()_aug_end - \label\()_aug
\label\()_aug:
	.ifnc	\lsda_enc, none
	pointer	\lsda_enc, LSDA
	.endif
\label\()_aug_end:
	.byte	0x41			# DW_CFA_advance_loc 1
	.byte	0x0e, 0x10		# DW_CFA_def_cfa_offset 16
	.byte	0x86, 0x02		# DW_CFA_offset rbp at cfa-16
	.byte	0x02, 0x03		# DW_CFA_advance_loc1 3
	.byte	0x0d, 0x06		# DW_CFA_def_cfa_register rbp
	.byte	0x03, 0x00, 0x01	# DW_CFA_advance_loc2 0x100
	.byte	0x83, 0x03		# DW_CFA_offset rbx at cfa-24
	.byte	0x04, 0x00, 0x00, 0x01, 0x00	# DW_CFA_advance_loc4 0x10000
	.byte	0xc3			# DW_CFA_restore rbx
	.byte	0x1d, 8, 0, 0, 0, 0, 0, 0, 0	# DW_CFA_MIPS_advance_loc8 8
	.byte	0x0c, 0x07, 0x08	# DW_CFA_def_cfa rsp+8
	.byte	0xc6			# DW_CFA_restore rbp
	.if	(\fde_enc & 0x0f) != 0x02 && (\fde_enc & 0x0f) != 0x0a
	.byte	0x01			# DW_CFA_set_loc START+0x20000
	pointer	\fde_enc, (\start + 0x20000)
	.byte	0x0e, 0x18		# DW_CFA_def_cfa_offset 24
	.endif
	.balign	4, 0
\label\()_end:
	.endm

	.section .eh_frame,"a",@progbits
	.balign	8
	cie	cie_udata8, 3, 0x04, none, none, "zR"
	fde	fde_udata8, cie_udata8, 0x04, 0x1000000, 0x20200, none
	cie	cie_udata4, 1, 0x03, none, none, "zR"
	fde	fde_udata4, cie_udata4, 0x03, 0x1040000, 0x20200, none
	cie	cie_sdata8_pcrel, 3, 0x1c, none, none, "zR"
	fde	fde_sdata8_pcrel, cie_sdata8_pcrel, 0x1c, 0x1080000, 0x20200, none
	cie	cie_absptr, 1, 0x00, none, none, "zR"
	fde	fde_absptr, cie_absptr, 0x00, 0x10c0000, 0x20200, none
	cie	cie_pers_udata2, 1, 0x1b, 0x02, 0x02, "zPLR"
	fde	fde_pers_udata2, cie_pers_udata2, 0x1b, 0x1100000, 0x20200, 0x02
	cie	cie_pers_sdata4, 3, 0x1b, 0x0b, 0x1b, "zPLR"
	fde	fde_pers_sdata4, cie_pers_sdata4, 0x1b, 0x1140000, 0x20200, 0x1b
	cie	cie_pers_udata8_indirect, 3, 0x1b, 0x84, 0x0c, "zPLR"
	fde	fde_pers_udata8, cie_pers_udata8_indirect, 0x1b, 0x1180000, 0x20200, 0x0c
	cie	cie_pers_pcrel_sdata8, 3, 0x1b, 0x1c, 0x10, "zPLR"
	fde	fde_pers_pcrel_sdata8, cie_pers_pcrel_sdata8, 0x1b, 0x11c0000, 0x20200, 0x10
	cie	cie_sdata2, 3, 0x0a, none, none, "zR"
	fde	fde_sdata2, cie_sdata2, 0x0a, 0x6000, 0x20, none
	cie	cie_udata2, 3, 0x02, none, none, "zR"
	fde	fde_udata2, cie_udata2, 0x02, 0x7000, 0x20, none
	cie	cie_uleb128, 3, 0x01, none, none, "zR"
	fde	fde_uleb128, cie_uleb128, 0x01, 0x1200000, 0x20200, none
	cie	cie_sleb128_datarel, 3, 0x39, none, none, "zR"
	fde	fde_sleb128_datarel, cie_sleb128_datarel, 0x39, 0x1240000, 0x20200, none
	# nested inside fde_udata8's range (as with a function's cold part)
	fde	fde_nested, cie_absptr, 0x00, 0x1000200, 0x10, none
	.long	0
	.section .note.GNU-stack,"",@progbits
