# cmake -DOUT=header -DFILES=a,b -P source_hash.cmake: writes OUT with one line,
#   #define DDP_SYNTHETIC_SOURCE "<16 hex digits of the SHA-256 of FILES' contents>"
# (rewritten only when it changes). common/data/data.c keys the test suite's cache of generated datasets
# with it (common/data/data_cache.c), so that a changed generator never reads an older one's data.
set(all "")
string(REPLACE "," ";" FILES "${FILES}")
foreach(f ${FILES})
  file(SHA256 ${f} h)
  string(APPEND all ${h})
endforeach()
string(SHA256 h "${all}")
string(SUBSTRING ${h} 0 16 h)
file(WRITE ${OUT}.tmp "#define DDP_SYNTHETIC_SOURCE \"${h}\"\n")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
