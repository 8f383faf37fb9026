#include "report.h"

#include <cstdio>

namespace zipccl::doctor {
namespace {

const char* tag(Level l) {
  switch (l) {
    case Level::kOk: return "ok";
    case Level::kInfo: return "info";
    case Level::kWarn: return "warn";
    default: return "FAIL";
  }
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
      continue;
    }
    o += c;
  }
  return o + "\"";
}

}  // namespace

bool Report::failed() const {
  for (const auto& f : items_)
    if (f.level == Level::kFail) return true;
  return false;
}

void Report::print_text() const {
  for (const auto& f : items_) std::printf("%-5s %-9s %s\n", tag(f.level), f.area.c_str(), f.text.c_str());
  std::printf("\n%s\n", failed() ? "zipccl-doctor: problems found (FAIL lines above)" : "zipccl-doctor: no problems found");
}

void Report::print_json() const {
  std::printf("{\"ok\":%s,\"findings\":[", failed() ? "false" : "true");
  for (size_t i = 0; i < items_.size(); ++i)
    std::printf("%s{\"area\":%s,\"level\":\"%s\",\"text\":%s}", i ? "," : "", json_str(items_[i].area).c_str(),
                tag(items_[i].level), json_str(items_[i].text).c_str());
  std::printf("]}\n");
}

}  // namespace zipccl::doctor
