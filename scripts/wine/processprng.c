// SPDX-License-Identifier: MIT
/*
 * bcryptprimitives.dll with ProcessPrng, for running Rust programs under
 * Debian bookworm's wine 8.0 (scripts/wine-run.sh builds it with mingw-w64
 * and installs it into the wine prefix). Tests only: never shipped.
 *
 * Rust's std (1.78 and later) fills its HashMap keys at start-up from
 * ProcessPrng, which bcryptprimitives.dll exports on Windows 10 and later
 * (real Windows has it; latmon-view needs nothing from here there). Wine
 * 8.0's builtin bcryptprimitives.dll lacks it, so every Rust program stops
 * before main. This one exports it on top of RtlGenRandom (advapi32's
 * SystemFunction036), which wine 8.0 implements.
 */
#include <windows.h>

/* RtlGenRandom, by its export name (ntsecapi.h's macro needs more headers). */
BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

/* As documented for Windows: fills `len` bytes, always returns TRUE. */
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
	while (len > 0) {
		/* RtlGenRandom takes a ULONG length: in chunks below 4 GiB. */
		ULONG n = len > 0x40000000 ? 0x40000000 : (ULONG)len;
		if (!SystemFunction036(data, n))
			ExitProcess(70); /* no randomness: as Windows, never return FALSE */
		data += n;
		len -= n;
	}
	return TRUE;
}
