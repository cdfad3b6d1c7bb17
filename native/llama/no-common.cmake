# Included by CMake right after llama.cpp's own project() call (CMAKE_PROJECT_llama.cpp_INCLUDE, passed by
# harness/wheelcache.py when bin/gatehouse compiles llama-cpp-python). llama-cpp-python forces llama.cpp's `common`
# library (and with it cpp-httplib) ON, yet its Python package loads only libllama and ggml: common is argument
# parsing, chat templates, downloads and the server's JSON, the largest part of the compile. A normal variable
# set here, before llama.cpp's option() (policy CMP0077), shadows that forced cache entry, so neither is compiled
# nor installed. The wheel's key holds this file's SHA-256: editing it builds the wheel again.
set(LLAMA_BUILD_COMMON OFF)
