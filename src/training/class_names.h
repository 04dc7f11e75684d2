// Class names in checkpoints: the metadata entry "class_names", a JSON array of strings (an image
// folder's classes, a text corpus's vocabulary), so that a checkpoint's predictions map back to
// names without the data at hand. Internal to the library.
#pragma once
#include <string>
#include <vector>

#include "freight/io/safetensors.h"

namespace freight::detail {

// Adds "class_names" to `meta` (nothing when `names` is empty).
void put_class_names(io::Metadata& meta, const std::vector<std::string>& names);
// The names saved in a checkpoint's metadata; empty when it has none. A malformed entry (not an
// array of strings, more names than the model's `classes` outputs, a name twice) is a
// freight::Error naming `file`.
std::vector<std::string> class_names_of(const io::Metadata& meta, const std::string& file,
                                        int64_t classes);
// Throws a freight::Error when both lists are given and differ: a model trained on one class
// order would have its predictions read with the other's names. The message names the
// checkpoint, the data and the first class that differs.
void check_same_classes(const std::vector<std::string>& saved, const std::vector<std::string>& data,
                        const std::string& checkpoint, const std::string& data_name);

}  // namespace freight::detail
