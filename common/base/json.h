/**
 * @file
 * @brief Text inside a JSON string, for the files the project writes by hand (the flight recorder's
 * rings, the lighthouse's event log).
 */
#ifndef DDP_JSON_H
#define DDP_JSON_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Writes @p s as the content of a JSON string (without the quotes): quotes and backslashes
 * escaped, control characters as `\u00XX`.
 * @param[in] f the open file.
 * @param[in] s NUL-terminated text.
 */
void json_put_escaped(FILE *f, const char *s);

#ifdef __cplusplus
}
#endif
#endif
