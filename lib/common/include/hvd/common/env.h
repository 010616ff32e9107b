#pragma once
/// Typed access to environment variables. Parse failures throw
/// InvalidArgument naming the variable and the bad value.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace hvd::env {

std::optional<std::string> get(const std::string& name);
std::string get_or(const std::string& name, const std::string& fallback);
/// Integer value; throws InvalidArgument on garbage ("HOROVOD_RANK='x' is not an integer").
std::optional<int64_t> get_int(const std::string& name);
int64_t get_int_or(const std::string& name, int64_t fallback);
std::optional<double> get_double(const std::string& name);
double get_double_or(const std::string& name, double fallback);
/// "1/true/yes/on" -> true, "0/false/no/off/''" -> false; else InvalidArgument.
bool get_bool_or(const std::string& name, bool fallback);

/// Strict parsers shared by env and CLI code.
std::optional<int64_t> parse_int(const std::string& text);
std::optional<double> parse_double(const std::string& text);

}  // namespace hvd::env
