/* Run a program as if on the other x86 vendor's processor: loaded with LD_PRELOAD, this library
 * turns on CPUID faulting (Linux arch_prctl ARCH_SET_CPUID, on CPUs whose /proc/cpuinfo lists
 * cpuid_fault) and answers each CPUID instruction from a SIGSEGV handler: the real answer with
 * another vendor's identity. Built as is, an AMD EPYC 9004 (Zen 4): the vendor string
 * "AuthenticAMD", family 19h model 11h in leaves 1 and 80000001h, an AMD brand string, and the
 * Intel-only AMX and AVX512-FP16 bits of leaf 7 cleared. Built with -DEMULATE_INTEL, an Intel
 * Xeon 4th generation (Sapphire Rapids): "GenuineIntel", family 6 model 8Fh in leaf 1, an Intel
 * brand string, and extended leaf 80000000h as Intel answers it (highest leaf 80000008h, no
 * vendor string). Libraries that choose code by vendor (oneMKL) then take the paths they take on
 * that vendor; the instructions still run on this CPU. Used by scripts/emulate/run.py (see its
 * docstring). */
#define _GNU_SOURCE
#include <cpuid.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define ARCH_SET_CPUID 0x1012
#ifdef EMULATE_INTEL
static const uint32_t SIGNATURE = 0x000806F8; /* family 6, model 8Fh, stepping 8 */
static const char BRAND[49] = "Intel(R) Xeon(R) Platinum 8488C                 ";
static void vendor(uint32_t r[4]) { r[1] = 0x756e6547; r[3] = 0x49656e69; r[2] = 0x6c65746e; }
#else
static const uint32_t SIGNATURE = 0x00A10F11; /* family 19h, model 11h, stepping 1 */
static const char BRAND[49] = "AMD EPYC 9R14 96-Core Processor                 ";
static void vendor(uint32_t r[4]) { r[1] = 0x68747541; r[3] = 0x69746e65; r[2] = 0x444d4163; }
#endif

static void real_cpuid(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
  syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1);
  __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
  syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
}

static void on_fault(int sig, siginfo_t *info, void *ctx) {
  ucontext_t *uc = ctx;
  uint8_t *ip = (uint8_t *)uc->uc_mcontext.gregs[REG_RIP];
  (void)info;
  if (!(ip[0] == 0x0f && ip[1] == 0xa2)) { /* a real fault: die of it */
    signal(sig, SIG_DFL);
    return;
  }
  uint32_t leaf = uc->uc_mcontext.gregs[REG_RAX], sub = uc->uc_mcontext.gregs[REG_RCX], r[4];
  real_cpuid(leaf, sub, r);
  if (leaf == 0) {
    vendor(r);
#ifdef EMULATE_INTEL
  } else if (leaf == 1) {
    r[0] = SIGNATURE;
  } else if (leaf == 0x80000001) {
    r[0] = 0; /* reserved on Intel */
  } else if (leaf == 0x80000000) {
    r[0] = 0x80000008;
    r[1] = r[2] = r[3] = 0;
#else
  } else if (leaf == 1 || leaf == 0x80000001) {
    r[0] = SIGNATURE;
  } else if (leaf == 7 && sub == 0) {
    r[3] &= ~((1u << 22) | (1u << 23) | (1u << 24) | (1u << 25)); /* amx_bf16, fp16, tile, int8 */
  } else if (leaf == 0x80000000) {
    r[0] = 0x80000028;
    vendor(r);
#endif
  } else if (leaf >= 0x80000002 && leaf <= 0x80000004) {
    memcpy(r, BRAND + 16 * (leaf - 0x80000002), 16);
  }
  uc->uc_mcontext.gregs[REG_RAX] = r[0];
  uc->uc_mcontext.gregs[REG_RBX] = r[1];
  uc->uc_mcontext.gregs[REG_RCX] = r[2];
  uc->uc_mcontext.gregs[REG_RDX] = r[3];
  uc->uc_mcontext.gregs[REG_RIP] += 2;
}

__attribute__((constructor)) static void start(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigaction(SIGSEGV, &sa, NULL);
  if (syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) != 0) {
    static const char msg[] = "vendor_cpuid: this CPU or kernel has no CPUID faulting\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(3);
  }
}
