/*
 * jit-table — JIT code described to libunwind in UNW_INFO_FORMAT_REMOTE_TABLE.
 *
 * Generates jit_outer and jit_inner (see jitcode.h), writes a CIE and one FDE
 * per function into the page after the code, and registers one
 * unw_dyn_info_t covering both functions whose table (sorted
 * {int32 start_ip_offset, int32 fde_offset} pairs, relative to segbase = the
 * code page) leads to those FDEs.  The table's name is "jit-table".
 * Scrambling (see jitcode.h) cancels it and overwrites it, the table and
 * the FDEs.
 */
#include "jitcode.h"

#include <libunwind.h>

static char table_name[] = "jit-table";
static unw_dyn_info_t info;
static int32_t table[2][2];
static unsigned char *eh_frame;
static size_t eh_frame_size;

static void scramble(void)
{
    _U_dyn_cancel(&info);
    memset(&info, 0xa5, sizeof info);
    memset(table, 0xa5, sizeof table);
    memset(eh_frame, 0xa5, eh_frame_size);
    memset(table_name, 'X', sizeof table_name - 1);
}

int main(int argc, char **argv)
{
    tp_allow_tracing();
    unsigned char *page = jit_alloc(8192);
    unsigned char *code = jit_emit_code(page);
    eh_frame = page + 4096;
    size_t fde_offsets[2];
    eh_frame_size = jit_emit_eh_frame(eh_frame, code, fde_offsets);

    table[0][0] = JIT_OUTER_OFFSET;
    table[0][1] = (int32_t)(eh_frame + fde_offsets[0] - page);
    table[1][0] = JIT_INNER_OFFSET;
    table[1][1] = (int32_t)(eh_frame + fde_offsets[1] - page);

    info.start_ip = (unw_word_t)code;
    info.end_ip = (unw_word_t)(code + JIT_INNER_OFFSET + sizeof jit_inner_code);
    info.format = UNW_INFO_FORMAT_REMOTE_TABLE;
    info.u.rti.name_ptr = (unw_word_t)table_name;
    info.u.rti.segbase = (unw_word_t)page;
    info.u.rti.table_len = sizeof table / sizeof(unw_word_t);
    info.u.rti.table_data = (unw_word_t)table;
    _U_dyn_register(&info);

    jit_write_perf_map(code);
    jit_scramble_after_stop(argc, argv, scramble);
    jit_run(code);
    return 0;
}
