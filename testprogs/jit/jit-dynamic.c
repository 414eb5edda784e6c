/*
 * jit-dynamic — JIT code described to libunwind in UNW_INFO_FORMAT_DYNAMIC.
 *
 * Generates jit_outer and jit_inner (see jitcode.h) and registers each with
 * _U_dyn_register as a procedure with two regions: the prologue and body, and
 * an epilogue region with a negative insn_count (the last N bytes).  The ops
 * follow liveunwind's x86_64 conventions for this format (an instruction is a
 * byte; `when` is the byte offset of the instruction in its region; sp-relative
 * offsets are from rsp after the instruction; fp-relative from rbp; SAVE_REG
 * of rsp into rbp establishes the frame pointer; POP_FRAMES restores the
 * entry frame).  Register numbers are libunwind's, which on x86_64 are the
 * DWARF ones.  A third, never-called procedure is registered too, so the
 * list has more than the entries on the stack.  Scrambling (see jitcode.h)
 * cancels all three and overwrites their records, ops and names.
 */
#include "jitcode.h"

#include <libunwind.h>

static char name_outer[] = "jit_outer";
static char name_inner[] = "jit_inner";
static char name_idle[] = "jit_idle";

static unw_dyn_region_info_t *region(int32_t insn_count, const unw_dyn_op_t *ops, unsigned n)
{
    unw_dyn_region_info_t *r = calloc(1, _U_dyn_region_info_size(n + 1));
    if (!r)
        tp_die("calloc");
    r->insn_count = insn_count;
    r->op_count = n + 1;
    memcpy(r->op, ops, n * sizeof *ops);
    _U_dyn_op_stop(&r->op[n]);
    return r;
}

static unw_dyn_info_t outer_info, inner_info, idle_info;

static void scramble(void)
{
    unw_dyn_info_t *infos[] = {&outer_info, &inner_info, &idle_info};
    for (size_t i = 0; i < sizeof infos / sizeof *infos; i++) {
        _U_dyn_cancel(infos[i]);
        for (unw_dyn_region_info_t *r = infos[i]->u.pi.regions; r; r = r->next)
            memset(r->op, 0xa5, r->op_count * sizeof *r->op);
        memset(infos[i], 0xa5, sizeof *infos[i]);
    }
    memset(name_outer, 'X', sizeof name_outer - 1);
    memset(name_inner, 'X', sizeof name_inner - 1);
    memset(name_idle, 'X', sizeof name_idle - 1);
}

static void add(unw_dyn_info_t *di, unsigned char *start, size_t size, char *name,
                unw_dyn_region_info_t *regions)
{
    memset(di, 0, sizeof *di);
    di->start_ip = (unw_word_t)start;
    di->end_ip = (unw_word_t)(start + size);
    di->format = UNW_INFO_FORMAT_DYNAMIC;
    di->u.pi.name_ptr = (unw_word_t)name;
    di->u.pi.regions = regions;
    _U_dyn_register(di);
}

int main(int argc, char **argv)
{
    tp_allow_tracing();
    unsigned char *code = jit_emit_code(jit_alloc(4096));

    unw_dyn_op_t outer_prologue[5], outer_epilogue[2];
    _U_dyn_op_add(&outer_prologue[0], _U_QP_TRUE, 0, UNW_X86_64_RSP, (unw_word_t)-8);
    _U_dyn_op_spill_sp_rel(&outer_prologue[1], _U_QP_TRUE, 0, UNW_X86_64_RBX, 0);
    _U_dyn_op_add(&outer_prologue[2], _U_QP_TRUE, 1, UNW_X86_64_RSP, (unw_word_t)-27);
    _U_dyn_op_spill_sp_rel(&outer_prologue[3], _U_QP_TRUE, 5, UNW_X86_64_RBP, 3);
    _U_dyn_op_add(&outer_prologue[4], _U_QP_TRUE, 0xa, UNW_X86_64_RSP, (unw_word_t)-5);
    _U_dyn_op_add(&outer_epilogue[0], _U_QP_TRUE, 0, UNW_X86_64_RSP, 32);
    _U_dyn_op_pop_frames(&outer_epilogue[1], _U_QP_TRUE, 4, 1);
    unw_dyn_region_info_t *outer_regions = region(0x25, outer_prologue, 5);
    outer_regions->next = region(-6, outer_epilogue, 2);

    unw_dyn_op_t inner_prologue[6], inner_epilogue[1];
    _U_dyn_op_add(&inner_prologue[0], _U_QP_TRUE, 0, UNW_X86_64_RSP, (unw_word_t)-8);
    _U_dyn_op_spill_sp_rel(&inner_prologue[1], _U_QP_TRUE, 0, UNW_X86_64_RBP, 0);
    _U_dyn_op_save_reg(&inner_prologue[2], _U_QP_TRUE, 1, UNW_X86_64_RSP, UNW_X86_64_RBP);
    _U_dyn_op_spill_fp_rel(&inner_prologue[3], _U_QP_TRUE, 4, UNW_X86_64_R12, (unw_word_t)-8);
    _U_dyn_op_add(&inner_prologue[4], _U_QP_TRUE, 4, UNW_X86_64_RSP, (unw_word_t)-8);
    _U_dyn_op_add(&inner_prologue[5], _U_QP_TRUE, 6, UNW_X86_64_RSP, (unw_word_t)-24);
    _U_dyn_op_pop_frames(&inner_epilogue[0], _U_QP_TRUE, 0, 1);
    unw_dyn_region_info_t *inner_regions = region(0x16, inner_prologue, 6);
    inner_regions->next = region(-2, inner_epilogue, 1);

    add(&outer_info, code + JIT_OUTER_OFFSET, sizeof jit_outer_code, name_outer, outer_regions);
    add(&inner_info, code + JIT_INNER_OFFSET, sizeof jit_inner_code, name_inner, inner_regions);
    /* Registered but never on the stack: a plain leaf with no ops. */
    add(&idle_info, code + 0x80, 16, name_idle, region(16, NULL, 0));

    jit_write_perf_map(code);
    jit_scramble_after_stop(argc, argv, scramble);
    jit_run(code);
    return 0;
}
