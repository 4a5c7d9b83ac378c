/* accl version. ACCL_VERSION_CODE = major * 10000 + minor * 100 + patch. */
#ifndef ACCL_VERSION_H_
#define ACCL_VERSION_H_

#define ACCL_MAJOR 0
#define ACCL_MINOR 1
#define ACCL_PATCH 0
#define ACCL_VERSION_CODE (ACCL_MAJOR * 10000 + ACCL_MINOR * 100 + ACCL_PATCH)

#endif /* ACCL_VERSION_H_ */
