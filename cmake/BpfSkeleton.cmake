# bpf_skeleton(<name> <source.bpf.c> [INCLUDES dir...] [DEPENDS file...])
#
# Compiles <source.bpf.c> with clang -target bpf -O2 -g against the kernel's uapi headers and
# libbpf's bpf_helpers.h (no vmlinux.h), embeds the object with `bpftool gen skeleton`, and
# defines an INTERFACE target <name>_skel whose include directory holds <name>.skel.h.
# The skeleton's C struct is named <name> (e.g. ig_ingress -> struct ig_ingress,
# ig_ingress__open_and_load()).
#
# Sets BPF_SKELETON_FOUND in the parent scope to TRUE when clang and bpftool were found.
include_guard(GLOBAL)

find_program(BPF_CLANG NAMES clang clang-16 clang-15 clang-14)
find_program(BPFTOOL NAMES bpftool PATHS /usr/sbin /sbin /usr/local/sbin)

if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set(_bpf_arch x86 CACHE INTERNAL "")
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  set(_bpf_arch arm64 CACHE INTERNAL "")
else()
  set(_bpf_arch ${CMAKE_SYSTEM_PROCESSOR} CACHE INTERNAL "")
endif()
# Debian keeps <asm/types.h> under the multiarch directory; clang -target bpf does not look there.
# Both are cached so every directory that calls bpf_skeleton() sees them (include_guard(GLOBAL)
# runs this block only once).
execute_process(COMMAND ${CMAKE_C_COMPILER} -print-multiarch
                OUTPUT_VARIABLE _bpf_multiarch_out OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
set(_bpf_multiarch "${_bpf_multiarch_out}" CACHE INTERNAL "")

function(bpf_skeleton name src)
  cmake_parse_arguments(ARG "" "" "INCLUDES;DEPENDS" ${ARGN})
  if(NOT BPF_CLANG OR NOT BPFTOOL)
    message(WARNING "bpf_skeleton(${name}): clang or bpftool not found; skipping")
    set(BPF_SKELETON_FOUND FALSE PARENT_SCOPE)
    return()
  endif()
  get_filename_component(src_abs ${src} ABSOLUTE)
  get_filename_component(src_dir ${src_abs} DIRECTORY)
  set(out_dir ${CMAKE_CURRENT_BINARY_DIR}/bpf)
  set(obj ${out_dir}/${name}.bpf.o)
  set(skel ${out_dir}/${name}.skel.h)
  set(incs -I${src_dir})
  foreach(d ${ARG_INCLUDES})
    list(APPEND incs -I${d})
  endforeach()
  if(_bpf_multiarch)
    list(APPEND incs -idirafter /usr/include/${_bpf_multiarch})
  endif()
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${out_dir}
    COMMAND ${BPF_CLANG} -target bpf -O2 -g -Wall -Werror -Wno-pass-failed
            -D__TARGET_ARCH_${_bpf_arch} ${incs} -MD -MF ${obj}.d -c ${src_abs} -o ${obj}
    DEPENDS ${src_abs} ${ARG_DEPENDS}
    DEPFILE ${obj}.d
    COMMENT "BPF ${name}: clang -target bpf"
    VERBATIM)
  add_custom_command(
    OUTPUT ${skel}
    COMMAND ${BPFTOOL} gen skeleton ${obj} name ${name} > ${skel}
    DEPENDS ${obj}
    COMMENT "BPF ${name}: bpftool gen skeleton"
    VERBATIM)
  add_custom_target(${name}_skel_gen DEPENDS ${skel})
  add_library(${name}_skel INTERFACE)
  add_dependencies(${name}_skel ${name}_skel_gen)
  target_include_directories(${name}_skel INTERFACE ${out_dir})
  set(BPF_SKELETON_FOUND TRUE PARENT_SCOPE)
endfunction()
