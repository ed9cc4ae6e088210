// SPDX-License-Identifier: MIT
/* Loads and attaches every program of the BPF object argv[1] (libbpf),
 * prints "attached", and holds them until killed (benches/cycle-floor.sh). */
#include <bpf/libbpf.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct bpf_object *obj;
	struct bpf_program *p;

	if (argc != 2) {
		fprintf(stderr, "usage: floor-load OBJ\n");
		return 2;
	}
	obj = bpf_object__open_file(argv[1], NULL);
	if (!obj || bpf_object__load(obj)) {
		fprintf(stderr, "floor-load: cannot load %s\n", argv[1]);
		return 1;
	}
	bpf_object__for_each_program(p, obj)
	{
		if (!bpf_program__attach(p)) {
			fprintf(stderr, "floor-load: cannot attach %s\n", bpf_program__name(p));
			return 1;
		}
	}
	printf("attached\n");
	fflush(stdout);
	pause();
	return 0;
}
