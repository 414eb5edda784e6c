/*
 * jit-gdb — JIT code described through the GDB JIT interface.
 *
 * Generates jit_outer and jit_inner (see jitcode.h) and builds, in memory, a
 * relocatable ELF object describing them the way LLVM's JITs do: .text with
 * sh_addr set to where the code runs, an .eh_frame (with sh_addr set to where
 * it lies inside the in-memory object) holding a CIE and the two FDEs, and a
 * .symtab whose function symbols are section-relative (ET_REL).  The object is
 * linked into __jit_debug_descriptor and announced with
 * __jit_debug_register_code(), on which gdb keeps a breakpoint.  A second,
 * empty-of-code object is registered first, so the list has two entries.
 * Scrambling (see jitcode.h) unregisters both and overwrites the entries and
 * the objects.
 */
#include "jitgdb.h"

static unsigned char *objects;

static void scramble(void)
{
    struct jit_code_entry *entry = __jit_debug_descriptor.first_entry;
    __jit_debug_descriptor.first_entry = NULL;
    while (entry) {
        struct jit_code_entry *next = entry->next_entry;
        __jit_debug_descriptor.relevant_entry = entry;
        __jit_debug_descriptor.action_flag = JIT_UNREGISTER_FN;
        __jit_debug_register_code();
        memset(entry, 0xa5, sizeof *entry);
        entry = next;
    }
    memset(objects, 0xa5, 2 * 4096);
}

int main(int argc, char **argv)
{
    tp_allow_tracing();
    unsigned char *page = jit_alloc(3 * 4096);
    objects = page + 4096;
    unsigned char *code = jit_emit_code(page);
    /* An object describing no code at all (just an ELF header): registered
       first, it must be skipped without harm. */
    unsigned char *empty = build_object(page + 4096, code, 0);
    ((Elf64_Ehdr *)empty)->e_shnum = 0;
    register_object(empty, sizeof(Elf64_Ehdr));
    size_t code_size = JIT_INNER_OFFSET + sizeof jit_inner_code;
    register_object(build_object(page + 2 * 4096, code, code_size), OBJECT_SIZE);

    jit_write_perf_map(code);
    jit_scramble_after_stop(argc, argv, scramble);
    jit_run(code);
    return 0;
}
