// A small, thread-safe Redis client over hiredis: a pool of connections to one server
// (redis://HOST:PORT[/DB]), binary-safe commands, replies as plain values, and Lua scripts run
// by their SHA1, loaded again when the server does not know it (after a restart).
// A lost connection is opened again once per command; a server that stays away is Error(io).
#pragma once
#include <sys/time.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <hiredis/hiredis.h>

#include "uocr/core/error.hpp"

namespace uocr_serve {

struct RedisReply {
  enum class Type { nil, string, integer, array, status };
  Type type = Type::nil;
  std::string str;  // string and status
  long long integer = 0;
  std::vector<RedisReply> elements;

  bool is_nil() const { return type == Type::nil; }
  // The reply as text: a string or status as is, an integer in decimal, nil as "".
  std::string text() const { return type == Type::integer ? std::to_string(integer) : str; }
  long long number() const { return type == Type::integer ? integer : str.empty() ? 0 : std::stoll(str); }
};

// Parses redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] (PORT defaults to 6379, DB to 0).
struct RedisAddress {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string user, password;  // AUTH after connecting when a password is given

  static RedisAddress parse(const std::string& url) {
    auto bad = [&] { return uocr::Error(uocr::Status::invalid_argument, "queue URL must be redis://[[USER]:PASSWORD@]HOST:PORT[/DB]"); };
    if (url.rfind("redis://", 0) != 0) throw bad();
    RedisAddress a;
    std::string rest = url.substr(8);
    const size_t at = rest.rfind('@');
    if (at != std::string::npos) {
      const std::string credentials = rest.substr(0, at);
      rest = rest.substr(at + 1);
      const size_t colon = credentials.find(':');
      if (colon == std::string::npos) throw bad();
      a.user = credentials.substr(0, colon);
      a.password = credentials.substr(colon + 1);
      if (a.password.empty()) throw bad();
    }
    const size_t slash = rest.find('/');
    if (slash != std::string::npos) {
      const std::string db = rest.substr(slash + 1);
      rest.resize(slash);
      if (!db.empty()) {
        if (db.find_first_not_of("0123456789") != std::string::npos || db.size() > 4) throw bad();
        a.db = std::stoi(db);
      }
    }
    const size_t colon = rest.rfind(':');
    a.host = rest.substr(0, colon);
    if (colon != std::string::npos) {
      const std::string port = rest.substr(colon + 1);
      if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) throw bad();
      a.port = std::stoi(port);
    }
    if (a.host.empty() || a.port < 1 || a.port > 65535) throw bad();
    return a;
  }
  // Without the password: for logs and messages.
  std::string url() const { return "redis://" + host + ":" + std::to_string(port) + "/" + std::to_string(db); }
};

class Redis {
 public:
  explicit Redis(const std::string& url) : address_(RedisAddress::parse(url)) {}
  ~Redis() {
    for (redisContext* c : idle_) redisFree(c);
  }
  Redis(const Redis&) = delete;
  Redis& operator=(const Redis&) = delete;

  const RedisAddress& address() const { return address_; }

  // Runs one command. An error reply is Error(io) with Redis's message ("redis: ERR ...").
  RedisReply command(const std::vector<std::string>& args) {
    for (int attempt = 0;; ++attempt) {
      Connection c(*this);
      std::vector<const char*> argv;
      std::vector<size_t> lengths;
      for (const std::string& a : args) {
        argv.push_back(a.data());
        lengths.push_back(a.size());
      }
      auto* reply = static_cast<redisReply*>(redisCommandArgv(c.get(), int(argv.size()), argv.data(), lengths.data()));
      if (reply == nullptr) {  // the connection is broken: drop it, and try once on a new one
        const std::string why = c.get()->errstr;
        c.discard();
        if (attempt == 0) continue;
        throw uocr::Error(uocr::Status::io, "cannot reach Redis at " + address_.url() + ": " + why);
      }
      std::unique_ptr<redisReply, void (*)(void*)> owned(reply, freeReplyObject);
      if (reply->type == REDIS_REPLY_ERROR) throw uocr::Error(uocr::Status::io, "redis: " + std::string(reply->str, reply->len));
      return convert(*reply);
    }
  }

  // Runs a Lua script by its SHA1 (SCRIPT LOAD once; again when a restarted server lost it).
  RedisReply eval(const std::string& script, const std::vector<std::string>& keys, const std::vector<std::string>& args) {
    std::vector<std::string> call = {"EVALSHA", script_sha(script, false), std::to_string(keys.size())};
    call.insert(call.end(), keys.begin(), keys.end());
    call.insert(call.end(), args.begin(), args.end());
    try {
      return command(call);
    } catch (const uocr::Error& e) {
      if (std::string(e.what()).find("NOSCRIPT") == std::string::npos) throw;
    }
    call[1] = script_sha(script, true);
    return command(call);
  }

 private:
  // A connection taken from the pool for one command, given back unless discarded.
  class Connection {
   public:
    explicit Connection(Redis& r) : r_(r), c_(r.take()) {}
    ~Connection() {
      if (c_ != nullptr) r_.give_back(c_);
    }
    redisContext* get() const { return c_; }
    void discard() {
      redisFree(c_);
      c_ = nullptr;
    }

   private:
    Redis& r_;
    redisContext* c_;
  };

  redisContext* take() {
    {
      std::lock_guard<std::mutex> lock(m_);
      if (!idle_.empty()) {
        redisContext* c = idle_.back();
        idle_.pop_back();
        return c;
      }
    }
    const timeval connect_timeout{5, 0}, io_timeout{30, 0};
    redisContext* c = redisConnectWithTimeout(address_.host.c_str(), address_.port, connect_timeout);
    if (c == nullptr || c->err) {
      const std::string why = c ? c->errstr : "out of memory";
      if (c) redisFree(c);
      throw uocr::Error(uocr::Status::io, "cannot reach Redis at " + address_.url() + ": " + why);
    }
    redisSetTimeout(c, io_timeout);
    redisEnableKeepAlive(c);
    auto setup = [&](std::vector<std::string> args, const char* what) {
      std::vector<const char*> argv;
      std::vector<size_t> lengths;
      for (const std::string& a : args) {
        argv.push_back(a.data());
        lengths.push_back(a.size());
      }
      auto* reply = static_cast<redisReply*>(redisCommandArgv(c, int(argv.size()), argv.data(), lengths.data()));
      const std::string why = reply == nullptr ? std::string(c->errstr) : reply->type == REDIS_REPLY_ERROR ? std::string(reply->str, reply->len) : "";
      if (reply) freeReplyObject(reply);
      if (reply == nullptr || !why.empty()) {
        redisFree(c);
        throw uocr::Error(uocr::Status::io, "Redis at " + address_.url() + " refused " + what + ": " + why);
      }
    };
    if (!address_.password.empty())
      setup(address_.user.empty() ? std::vector<std::string>{"AUTH", address_.password} : std::vector<std::string>{"AUTH", address_.user, address_.password},
            "AUTH");
    if (address_.db != 0) setup({"SELECT", std::to_string(address_.db)}, "SELECT");
    return c;
  }
  void give_back(redisContext* c) {
    std::lock_guard<std::mutex> lock(m_);
    if (c->err || idle_.size() >= kMaxIdle) {
      redisFree(c);
      return;
    }
    idle_.push_back(c);
  }

  static RedisReply convert(const redisReply& r) {
    RedisReply out;
    switch (r.type) {
      case REDIS_REPLY_STRING: out.type = RedisReply::Type::string; out.str.assign(r.str, r.len); break;
      case REDIS_REPLY_STATUS: out.type = RedisReply::Type::status; out.str.assign(r.str, r.len); break;
      case REDIS_REPLY_INTEGER: out.type = RedisReply::Type::integer; out.integer = r.integer; break;
      case REDIS_REPLY_ARRAY:
        out.type = RedisReply::Type::array;
        for (size_t i = 0; i < r.elements; ++i) out.elements.push_back(convert(*r.element[i]));
        break;
      default: break;
    }
    return out;
  }

  std::string script_sha(const std::string& script, bool reload) {
    {
      std::lock_guard<std::mutex> lock(m_);
      auto it = shas_.find(script);
      if (it != shas_.end() && !reload) return it->second;
    }
    const std::string sha = command({"SCRIPT", "LOAD", script}).text();
    std::lock_guard<std::mutex> lock(m_);
    shas_[script] = sha;
    return sha;
  }

  static constexpr size_t kMaxIdle = 32;
  RedisAddress address_;
  std::mutex m_;
  std::vector<redisContext*> idle_;
  std::map<std::string, std::string> shas_;  // script -> SHA1
};

}  // namespace uocr_serve
