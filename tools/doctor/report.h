// zipccl-doctor's findings: one line per check, ok / warn / fail, printed as text or JSON.
#pragma once

#include <string>
#include <vector>

namespace zipccl::doctor {

enum class Level { kOk, kInfo, kWarn, kFail };

struct Finding {
  std::string area;    // "nccl", "plugin", "rdma", "gdr", "gpu", "codec", "loopback"
  Level level;
  std::string text;
};

class Report {
 public:
  void add(const std::string& area, Level level, std::string text) {
    items_.push_back({area, level, std::move(text)});
  }
  bool failed() const;
  void print_text() const;
  void print_json() const;

 private:
  std::vector<Finding> items_;
};

}  // namespace zipccl::doctor
