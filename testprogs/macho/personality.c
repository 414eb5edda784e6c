/* Stand-ins for the C++ runtime: the linker needs the personality routine
 * and _Unwind_Resume to exist; the test programs never throw. */
void __gxx_personality_v0(void) {}
void _Unwind_Resume(void) {
    for (;;) {
    }
}
