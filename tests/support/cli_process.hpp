// Running the `uocr` CLI as a child process: through the shell with its output captured, or
// spawned so that a test can kill it (the SIGKILL-and-resume tests); reading back the files it wrote.
#pragma once
#include <doctest/doctest.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace uocr_test {

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

struct CliRun {
  int status = -1;     // exit status, -1 when it did not exit normally
  std::string output;  // stdout + stderr
};

// Runs the CLI through the shell: `arguments` as the shell reads them; `env` prefixes the command
// (e.g. "env -u VAR ").
inline CliRun run_cli(const std::string& arguments, const std::string& env = "") {
  CliRun r;
  const std::string cmd = env + "'" + cli_path() + "' " + arguments + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// How spawn_cli starts the CLI besides its arguments.
struct SpawnOptions {
  std::string tmpdir;      // TMPDIR for the child; "" keeps the caller's environment
  bool own_group = false;  // a process group of its own, as a shell job (Ctrl-C signals the group)
};

// Starts the CLI with `args` (no shell), stdout and stderr to `log`; returns its pid.
inline pid_t spawn_cli(std::vector<std::string> args, const std::string& log, const SpawnOptions& options = {}) {
  args.insert(args.begin(), cli_path());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env;
  if (!options.tmpdir.empty()) env.push_back("TMPDIR=" + options.tmpdir);
  for (char** e = environ; *e != nullptr; ++e)
    if (options.tmpdir.empty() || std::strncmp(*e, "TMPDIR=", 7) != 0) env.emplace_back(*e);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  if (options.own_group) {
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
  }
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  REQUIRE(rc == 0);
  return pid;
}

// The child's exit status; 128 + signal when a signal ended it.
inline int wait_exit(pid_t pid) {
  int st = 0;
  REQUIRE(waitpid(pid, &st, 0) == pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
}

}  // namespace uocr_test
