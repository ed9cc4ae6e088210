/* SPDX-License-Identifier: MIT */
/* Minimal argp declarations for building libbpf-sys's vendored elfutils
 * (libelf + the libeu helpers it builds first) against musl, which has no
 * argp. Only lib/color.c and lib/printversion.c use these, and libelf
 * never calls them: nothing here is ever defined or run. */
#ifndef LATMON_MUSL_ARGP_H
#define LATMON_MUSL_ARGP_H
#include <stdio.h>
typedef int error_t;
struct argp_state;
struct argp_option {
  const char *name;
  int key;
  const char *arg;
  int flags;
  const char *doc;
  int group;
};
struct argp_child;
struct argp {
  const struct argp_option *options;
  error_t (*parser)(int key, char *arg, struct argp_state *state);
  const char *args_doc;
  const char *doc;
  const struct argp_child *children;
  char *(*help_filter)(int key, const char *text, void *input);
  const char *argp_domain;
};
struct argp_state {
  const struct argp *root_argp;
  int argc;
  char **argv;
  int next;
  unsigned flags;
  unsigned arg_num;
  int quoted;
  void *input;
  void **child_inputs;
  void *hook;
  char *name;
  FILE *err_stream;
  FILE *out_stream;
  void *pstate;
};
#define OPTION_ARG_OPTIONAL 0x1
#define ARGP_ERR_UNKNOWN 7 /* E2BIG, as glibc */
#define ARGP_KEY_ARG 0
#define ARGP_KEY_END 0x1000001
#define ARGP_KEY_INIT 0x1000003
#define ARGP_HELP_SEE 0x04
extern void argp_help(const struct argp *argp, FILE *stream, unsigned flags, char *name);
#endif
