// select_ok: a policy's selection in a test, failing the test (and giving an empty selection)
// when select returns an error.
#pragma once

#include <gtest/gtest.h>

#include <utility>

#include "kv/kv_catalog.h"
#include "sparse/selection_policy.h"

namespace leoam::testing_util {

inline sparse::Selection select_ok(sparse::SelectionPolicy& p, const sparse::SelectionQuery& query, KvCatalog& catalog) {
  auto s = p.select(query, catalog);
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return s.is_ok() ? std::move(s).value() : sparse::Selection{};
}

}  // namespace leoam::testing_util
