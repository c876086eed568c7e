/* The floor under any program's start: a static executable with no C library
 * at all, whose entry point exits at once. Built by run.sh with
 * `cc -static -nostdlib`; against noop.c it shows what a C library's own
 * start-up costs (docs/benchmarks.md, `floor`). */
void _start(void) {
#if defined(__x86_64__)
  __asm__ volatile("mov $231, %eax\n\txor %edi, %edi\n\tsyscall"); /* exit_group(0) */
#elif defined(__aarch64__)
  __asm__ volatile("mov x8, #94\n\tmov x0, #0\n\tsvc #0"); /* exit_group(0) */
#else
#error "no exit system call written for this architecture"
#endif
  for (;;) {
  }
}
