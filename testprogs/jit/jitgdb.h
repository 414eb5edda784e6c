/*
 * jitgdb.h — the GDB JIT interface as the JIT test programs use it.
 *
 * __jit_debug_descriptor and __jit_debug_register_code, and an in-memory
 * relocatable ELF object describing jit_outer and jit_inner (see jitcode.h)
 * the way LLVM's JITs do: .text with sh_addr set to where the code runs, an
 * .eh_frame (sh_addr where it lies inside the object) with a CIE and the two
 * FDEs, and a .symtab of section-relative function symbols (ET_REL).
 * jit-gdb and jit-soak use it; one program includes it once.
 */
#ifndef JITGDB_H
#define JITGDB_H

#include "jitcode.h"

#include <elf.h>

typedef enum { JIT_NOACTION = 0, JIT_REGISTER_FN, JIT_UNREGISTER_FN } jit_actions_t;

struct jit_code_entry {
    struct jit_code_entry *next_entry;
    struct jit_code_entry *prev_entry;
    const char *symfile_addr;
    uint64_t symfile_size;
};

struct jit_descriptor {
    uint32_t version;
    uint32_t action_flag;
    struct jit_code_entry *relevant_entry;
    struct jit_code_entry *first_entry;
};

/* gdb puts a breakpoint here; the asm keeps the call from being elided. */
void __attribute__((noinline)) __jit_debug_register_code(void) { __asm__ volatile(""); }

struct jit_descriptor __jit_debug_descriptor = {1, 0, 0, 0};

enum { TEXT = 1, EH_FRAME, SYMTAB, STRTAB, SHSTRTAB, NSECTIONS };
#define OFF_TEXT 0x40
#define OFF_EH_FRAME 0x100
#define OFF_SYMTAB 0x200
#define OFF_STRTAB 0x260
#define OFF_SHSTRTAB 0x2a0
#define OFF_SHDRS 0x300
#define OBJECT_SIZE (OFF_SHDRS + NSECTIONS * sizeof(Elf64_Shdr))

static const char strtab[] = "\0jit_outer\0jit_inner";
static const char shstrtab[] = "\0.text\0.eh_frame\0.symtab\0.strtab\0.shstrtab";

/* Builds the object at `obj` (OBJECT_SIZE zeroed bytes near the code: the
   .eh_frame's pcrel sdata4 pointers must reach it). */
static unsigned char *build_object(unsigned char *obj, const unsigned char *code, size_t code_size)
{
    Elf64_Ehdr *eh = (Elf64_Ehdr *)obj;
    memcpy(eh->e_ident, ELFMAG, SELFMAG);
    eh->e_ident[EI_CLASS] = ELFCLASS64;
    eh->e_ident[EI_DATA] = ELFDATA2LSB;
    eh->e_ident[EI_VERSION] = EV_CURRENT;
    eh->e_ident[EI_OSABI] = ELFOSABI_NONE;
    eh->e_type = ET_REL;
    eh->e_machine = EM_X86_64;
    eh->e_version = EV_CURRENT;
    eh->e_ehsize = sizeof *eh;
    eh->e_shoff = OFF_SHDRS;
    eh->e_shentsize = sizeof(Elf64_Shdr);
    eh->e_shnum = NSECTIONS;
    eh->e_shstrndx = SHSTRTAB;

    memcpy(obj + OFF_TEXT, code, code_size);
    size_t fde_offsets[2];
    size_t eh_size = jit_emit_eh_frame(obj + OFF_EH_FRAME, code, fde_offsets);

    Elf64_Sym *sym = (Elf64_Sym *)(obj + OFF_SYMTAB);
    sym[1] = (Elf64_Sym){.st_name = 1, .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC),
                         .st_shndx = TEXT, .st_value = JIT_OUTER_OFFSET,
                         .st_size = sizeof jit_outer_code};
    sym[2] = (Elf64_Sym){.st_name = 11, .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC),
                         .st_shndx = TEXT, .st_value = JIT_INNER_OFFSET,
                         .st_size = sizeof jit_inner_code};
    memcpy(obj + OFF_STRTAB, strtab, sizeof strtab);
    memcpy(obj + OFF_SHSTRTAB, shstrtab, sizeof shstrtab);

    Elf64_Shdr *sh = (Elf64_Shdr *)(obj + OFF_SHDRS);
    sh[TEXT] = (Elf64_Shdr){.sh_name = 1, .sh_type = SHT_PROGBITS,
                            .sh_flags = SHF_ALLOC | SHF_EXECINSTR, .sh_addr = (uintptr_t)code,
                            .sh_offset = OFF_TEXT, .sh_size = code_size, .sh_addralign = 16};
    sh[EH_FRAME] = (Elf64_Shdr){.sh_name = 7, .sh_type = SHT_PROGBITS, .sh_flags = SHF_ALLOC,
                                .sh_addr = (uintptr_t)(obj + OFF_EH_FRAME),
                                .sh_offset = OFF_EH_FRAME, .sh_size = eh_size,
                                .sh_addralign = 8};
    sh[SYMTAB] = (Elf64_Shdr){.sh_name = 17, .sh_type = SHT_SYMTAB, .sh_offset = OFF_SYMTAB,
                              .sh_size = 3 * sizeof(Elf64_Sym), .sh_link = STRTAB, .sh_info = 1,
                              .sh_addralign = 8, .sh_entsize = sizeof(Elf64_Sym)};
    sh[STRTAB] = (Elf64_Shdr){.sh_name = 25, .sh_type = SHT_STRTAB, .sh_offset = OFF_STRTAB,
                              .sh_size = sizeof strtab, .sh_addralign = 1};
    sh[SHSTRTAB] = (Elf64_Shdr){.sh_name = 33, .sh_type = SHT_STRTAB,
                                .sh_offset = OFF_SHSTRTAB, .sh_size = sizeof shstrtab,
                                .sh_addralign = 1};
    return obj;
}

/* Links an entry for the object into the descriptor's list and tells gdb; returns it. */
static struct jit_code_entry *register_object(const unsigned char *obj, size_t size)
{
    struct jit_code_entry *entry = calloc(1, sizeof *entry);
    if (!entry)
        tp_die("calloc");
    entry->symfile_addr = (const char *)obj;
    entry->symfile_size = size;
    entry->next_entry = __jit_debug_descriptor.first_entry;
    if (entry->next_entry)
        entry->next_entry->prev_entry = entry;
    __jit_debug_descriptor.first_entry = entry;
    __jit_debug_descriptor.relevant_entry = entry;
    __jit_debug_descriptor.action_flag = JIT_REGISTER_FN;
    __jit_debug_register_code();
    return entry;
}


#endif
