/** The release this client belongs to: the server's and the Python client's number too (the suite checks). */
export const VERSION = "0.1.0";
