/* The call chain every Mach-O test binary runs (see Makefile):
 *
 *   main → fp_saved ×4 (recursive) → frameless_small → big_frame
 *        → dwarf_cfa (asm, CFA kept in a callee-saved register)
 *        → cxx_cleanup (C++ with a destructor: personality + LSDA)
 *        → leaf_stop
 *
 * Each C function keeps values live across its call so the compiler has to
 * save callee-saved registers (general and, in fp_saved, floating point);
 * tools/macho_core.py stops the emulator on entry to leaf_stop and records
 * every frame's true registers, which liveunwind must recover.
 */
#ifndef CHAIN_H
#define CHAIN_H

#define NOINLINE __attribute__((noinline))

#ifdef __cplusplus
extern "C" {
#endif
long fp_saved(long depth, long seed);
long frameless_small(long seed);
long big_frame(long seed);
long dwarf_cfa(long seed);
long cxx_cleanup(long seed);
long leaf_stop(long seed);
/* Keeps the compiler from folding values it could otherwise prove. */
extern volatile long chain_sink;
#ifdef __cplusplus
}
#endif

#endif
